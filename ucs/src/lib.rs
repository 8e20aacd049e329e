//! # ucs — rucx services
//!
//! The bottom layer of rucx, with no networking of its own: the error and outcome types shared by
//! every layer, configuration from `RUCX_*` environment variables, logging, waiting for events
//! (epoll event set, eventfd wake-ups, deadline timers on an injectable clock), a bounded
//! lock-free MPMC queue, a memory registration cache and a monotonic time source.
//!
//! | module | what |
//! | --- | --- |
//! | [`status`] | [`Outcome`] (Done / InProgress / NoResource) and [`Error`] |
//! | [`codec`] | the wire codec of every decoder of peer bytes: little-endian reader/writer, [`codec::WireError`] |
//! | [`config`] | `RUCX_*` variables, UCX value syntax, the variable registry, unknown-name check |
//! | [`log`] | `tracing` setup from `RUCX_LOG_LEVEL`, [`log::init_program`] for every binary |
//! | [`limits`] | descriptor and memory limits: bounds checks, `try_vec`, errors naming the limit |
//! | [`time`] | [`time::Clock`], the real monotonic clock and a manual one for tests |
//! | [`async_ctx`] | epoll [`async_ctx::EventSet`], eventfd [`async_ctx::Waker`], deadline [`async_ctx::TimerQueue`] |
//! | [`mpmc`] | bounded lock-free [`mpmc::MpmcQueue`] (loom-checked) |
//! | [`rcache`] | [`rcache::Rcache`], a registration cache generic over a [`rcache::Registrar`] |

#![warn(missing_docs)]

pub mod async_ctx;
pub mod codec;
pub mod config;
pub mod limits;
pub mod log;
pub mod mpmc;
pub mod random;
pub mod rcache;
pub mod status;
#[doc(hidden)]
pub mod testing;
pub mod time;
pub mod varint;

mod sync;

pub use status::{Error, Outcome, Result};

/// ucs's own variables: logging and the registration cache. They live here, above `config`,
/// `log` and `rcache`, so that the registry (`config`) does not import the modules whose
/// variables it lists, which import it.
pub static UCS_VARS: [config::ConfigVar; 4] = [
    log::LOG_LEVEL_VAR,
    rcache::RCACHE_ENABLE_VAR,
    rcache::RCACHE_MAX_REGIONS_VAR,
    rcache::RCACHE_MAX_SIZE_VAR,
];
