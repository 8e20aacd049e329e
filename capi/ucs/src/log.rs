//! Logging: UCX's handler stack and default handler, writing through rucx's `tracing` log.
//!
//! `ucs_log_dispatch` (C, `cshim.c`) takes a snapshot of the stack ([`rucx_ucs_log_handlers`])
//! and calls the handlers from the last pushed down to the default handler, which sits at the
//! bottom, until one returns `UCS_LOG_FUNC_RC_STOP`. The default handler formats a message its
//! component's level enables and hands it to [`rucx_ucs_log_emit`], which writes it as a
//! `tracing` event (target `ucx`) on stderr. The level of the global component starts at
//! `RUCX_LOG_LEVEL`, else `UCX_LOG_LEVEL`, else `warn`, set when the library loads.

use std::ffi::{c_char, c_void, CStr};
use std::sync::{Mutex, Once};

/// The most handlers the stack holds (UCX's limit).
pub const MAX_HANDLERS: usize = 32;

/// `ucs_log_level_t` values this module uses.
pub mod level {
    /// `UCS_LOG_LEVEL_FATAL`.
    pub const FATAL: i32 = 0;
    /// `UCS_LOG_LEVEL_ERROR`.
    pub const ERROR: i32 = 1;
    /// `UCS_LOG_LEVEL_WARN`.
    pub const WARN: i32 = 2;
    /// `UCS_LOG_LEVEL_DIAG`.
    pub const DIAG: i32 = 3;
    /// `UCS_LOG_LEVEL_INFO`.
    pub const INFO: i32 = 4;
    /// `UCS_LOG_LEVEL_DEBUG`.
    pub const DEBUG: i32 = 5;
    /// `UCS_LOG_LEVEL_TRACE` (the finer trace levels follow, up to POLL = 11).
    pub const TRACE: i32 = 6;
    /// `UCS_LOG_LEVEL_TRACE_POLL`, the finest.
    pub const TRACE_POLL: i32 = 11;
    /// `UCS_LOG_LEVEL_PRINT`: `ucs_print`, shown when `log_print_enable` is set.
    pub const PRINT: i32 = 13;
}

/// A log handler: `ucs_log_func_t` (the `va_list` is passed as the pointer it decays to).
pub type LogFunc = unsafe extern "C" fn(
    file: *const c_char,
    line: u32,
    function: *const c_char,
    level: i32,
    comp_conf: *const c_void,
    format: *const c_char,
    ap: *mut c_void,
) -> i32;

/// The default handler (`ucs_log_default_handler`, written in C) as a [`LogFunc`].
fn default_handler() -> LogFunc {
    let jump: extern "C" fn() = crate::cvararg::ucs_log_default_handler;
    // SAFETY: the exported name is a jump to the C handler, whose signature is LogFunc's; the
    // jump passes every argument register through unchanged.
    unsafe { std::mem::transmute::<extern "C" fn(), LogFunc>(jump) }
}

/// The handler stack; empty means "only the default handler".
static HANDLERS: Mutex<Vec<LogFunc>> = Mutex::new(Vec::new());

fn with_handlers<R>(f: impl FnOnce(&mut Vec<LogFunc>) -> R) -> R {
    let mut h = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
    if h.is_empty() {
        h.push(default_handler());
    }
    f(&mut h)
}

/// The UCX level for a level name (UCX's names, as `RUCX_LOG_LEVEL` takes them).
pub fn parse_level(text: &str) -> Option<i32> {
    Some(match text.trim().to_ascii_lowercase().as_str() {
        "fatal" => level::FATAL,
        "error" => level::ERROR,
        "warn" | "warning" => level::WARN,
        "diag" => level::DIAG,
        "info" => level::INFO,
        "debug" => level::DEBUG,
        "trace" => level::TRACE,
        "req" => 7,
        "data" => 8,
        "async" => 9,
        "func" => 10,
        "poll" => level::TRACE_POLL,
        "off" | "none" => -1,
        _ => return None,
    })
}

/// The configured level text: `RUCX_LOG_LEVEL`, else `UCX_LOG_LEVEL`.
fn level_setting() -> Option<(String, String)> {
    ["RUCX_LOG_LEVEL", "UCX_LOG_LEVEL"]
        .iter()
        .find_map(|name| Some((name.to_string(), std::env::var(name).ok()?)))
}

/// Applies the configured level to the global component (run when the library loads).
pub fn apply_env_level() {
    if let Some((name, text)) = level_setting() {
        match parse_level(&text) {
            Some(l) => crate::data::set_log_level(l),
            None => {
                init_tracing();
                tracing::warn!(target: "ucx", "{name}={text:?} is not a log level; using warn");
            }
        }
    }
}

/// Runs when the library is loaded, before `main`: empties the configuration list and
/// applies the environment's log level.
extern "C" fn on_load() {
    crate::data::init_config_list();
    apply_env_level();
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

/// Installs the `tracing` subscriber of this library once (stderr, all levels: the handlers
/// already filtered by the component's level).
fn init_tracing() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .try_init();
    });
}

fn cstr<'a>(p: *const c_char) -> std::borrow::Cow<'a, str> {
    if p.is_null() {
        return "".into();
    }
    // SAFETY: the C side passes NUL-terminated strings (or NULL, handled above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy()
}

/// Called by `cshim.c`: copies the handler stack, bottom first, into `out` (room for `max`);
/// gives the count.
///
/// # Safety
/// `out` must have room for `max` entries.
#[no_mangle]
pub unsafe extern "C" fn rucx_ucs_log_handlers(out: *mut LogFunc, max: u32) -> u32 {
    with_handlers(|h| {
        let n = h.len().min(max as usize);
        for (i, f) in h.iter().take(n).enumerate() {
            // SAFETY: the caller gave room for `max` >= n entries.
            unsafe { out.add(i).write(*f) };
        }
        n as u32
    })
}

/// Called by `cshim.c`: writes one formatted message (a line per message line) to the log.
#[no_mangle]
pub extern "C" fn rucx_ucs_log_emit(
    file: *const c_char,
    line: u32,
    function: *const c_char,
    level: i32,
    comp_name: *const c_char,
    message: *const c_char,
) {
    crate::guarded("rucx_ucs_log_emit", (), || {
        init_tracing();
        let (file, function, comp) = (cstr(file), cstr(function), cstr(comp_name));
        let message = cstr(message);
        let file = file.rsplit('/').next().unwrap_or_default();
        let place = if line > 0 {
            format!("{file}:{line} {function}")
        } else {
            String::new()
        };
        match level {
            level::FATAL | level::ERROR => {
                tracing::error!(target: "ucx", "{comp} {place} {message}")
            }
            level::WARN => tracing::warn!(target: "ucx", "{comp} {place} {message}"),
            level::DIAG | level::INFO | level::PRINT => {
                tracing::info!(target: "ucx", "{comp} {place} {message}")
            }
            level::DEBUG => tracing::debug!(target: "ucx", "{comp} {place} {message}"),
            _ => tracing::trace!(target: "ucx", "{comp} {place} {message}"),
        }
    })
}

/// Called by `cshim.c` for `ucs_fatal_error_*`: logs the message and aborts, as UCX does.
#[no_mangle]
pub extern "C" fn rucx_ucs_fatal(
    file: *const c_char,
    line: u32,
    function: *const c_char,
    message: *const c_char,
) -> ! {
    rucx_ucs_log_emit(file, line, function, level::FATAL, c"UCX".as_ptr(), message);
    std::process::abort()
}

/// `void ucs_log_push_handler(ucs_log_func_t handler)`: the new handler runs first. A NULL
/// handler, or one beyond the 32 the stack holds, is refused with a log line.
#[no_mangle]
pub extern "C" fn ucs_log_push_handler(handler: Option<LogFunc>) {
    crate::guarded("ucs_log_push_handler", (), || {
        let Some(handler) = handler else {
            tracing::warn!(target: "ucx", "ucs_log_push_handler: NULL handler ignored");
            return;
        };
        let pushed = with_handlers(|h| {
            if h.len() < MAX_HANDLERS {
                h.push(handler);
                true
            } else {
                false
            }
        });
        if !pushed {
            init_tracing();
            tracing::error!(
                target: "ucx",
                "ucs_log_push_handler: the stack is full ({MAX_HANDLERS} handlers); handler ignored"
            );
        }
    })
}

/// `void ucs_log_pop_handler(void)`: removes the last pushed handler (never the default one).
#[no_mangle]
pub extern "C" fn ucs_log_pop_handler() {
    with_handlers(|h| {
        if h.len() > 1 {
            h.pop();
        }
    });
}

/// `unsigned ucs_log_num_handlers(void)`: handlers on the stack, the default one included.
#[no_mangle]
pub extern "C" fn ucs_log_num_handlers() -> u32 {
    with_handlers(|h| h.len() as u32)
}

/// `void ucs_log_flush(void)`: writes out buffered log output.
#[no_mangle]
pub extern "C" fn ucs_log_flush() {
    use std::io::Write;
    let _ = std::io::stderr().flush();
}

/// `size_t ucs_log_get_buffer_size(void)`: the longest message a handler formats.
#[no_mangle]
pub extern "C" fn ucs_log_get_buffer_size() -> usize {
    1024
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn probe(
        _: *const c_char,
        _: u32,
        _: *const c_char,
        _: i32,
        _: *const c_void,
        _: *const c_char,
        _: *mut c_void,
    ) -> i32 {
        0
    }

    #[test]
    fn the_stack_keeps_its_default_handler_and_its_limit() {
        let base = ucs_log_num_handlers();
        assert!(base >= 1);
        ucs_log_push_handler(Some(probe));
        assert_eq!(ucs_log_num_handlers(), base + 1);
        ucs_log_pop_handler();
        assert_eq!(ucs_log_num_handlers(), base);
        for _ in 0..3 * MAX_HANDLERS {
            ucs_log_push_handler(Some(probe));
        }
        assert_eq!(ucs_log_num_handlers() as usize, MAX_HANDLERS);
        for _ in 0..3 * MAX_HANDLERS {
            ucs_log_pop_handler();
        }
        assert_eq!(ucs_log_num_handlers(), 1, "the default handler stays");
        ucs_log_push_handler(None);
        assert_eq!(ucs_log_num_handlers(), 1);
    }

    #[test]
    fn level_names() {
        assert_eq!(parse_level("WARN"), Some(level::WARN));
        assert_eq!(parse_level("poll"), Some(level::TRACE_POLL));
        assert_eq!(parse_level("loud"), None);
    }
}
