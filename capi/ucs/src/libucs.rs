//! # libucs.so.0 — UCX's `ucs` services as UCX's clients import them
//!
//! What MPI libraries, UCX's own tools (`ucx_perftest`), its example programs and `io_demo`
//! import from libucs, each working as UCX 1.13 documents it:
//!
//! - [`status`]: the status codes and `ucs_status_string` (libucp compiles this module in too);
//! - [`log`]: `ucs_log_dispatch`, the handler stack (`ucs_log_push_handler` …) and the default
//!   handler, which writes through rucx's `tracing` log; the level comes from
//!   `RUCX_LOG_LEVEL`, else `UCX_LOG_LEVEL` (default `warn`);
//! - [`data`]: the data objects clients import, with UCX 1.13's sizes (`ucs_global_opts`,
//!   `ucs_memory_type_names` …), some through copy relocations;
//! - [`clock`]: the TSC switch and frequency the header-inline `ucs_get_time` uses;
//! - [`memunits`], [`sock`], [`memtrack`], [`async_ctx`], [`sys`], [`string_set`], [`info`]:
//!   memory-unit strings, socket-address helpers, memory tracking, async contexts, system
//!   queries and string helpers, string sets, what `ucx_info` asks;
//! - [`cvararg`]: the exported names of the functions written in C (`src/cshim.c`: variadic
//!   functions and the string buffer).
//!
//! Bad input (NULL pointers, unknown values) gets an error status or an empty result and, where
//! UCX would log, one log line; nothing here aborts except `ucs_fatal_error_*`, which UCX
//! documents as ending the process.

#![warn(missing_docs)]

pub mod async_ctx;
pub mod clock;
pub mod cvararg;
pub mod data;
pub mod info;
pub mod log;
pub mod memtrack;
pub mod memunits;
pub mod sock;
#[path = "lib.rs"]
pub mod status;
pub mod string_set;
pub mod sys;

pub use status::{codes, status_cstr, Status};

/// Runs the body of an exported function that does more than a few loads and stores, so a
/// Rust panic (a bug) becomes `on_panic` and one log line instead of unwinding into C.
pub(crate) fn guarded<R>(name: &str, on_panic: R, body: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(_) => {
            let _ = std::panic::catch_unwind(
                || tracing::error!(target: "ucx", "{name}: internal error (panic); returning"),
            );
            on_panic
        }
    }
}
