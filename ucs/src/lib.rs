//! # ucs — rucx services
//!
//! The bottom layer of rucx, with no networking of its own: the error and outcome types shared by
//! every layer, configuration from `RUCX_*` environment variables, logging, the async context
//! (epoll event set, eventfd wake-ups, timers on an injectable clock), a bounded lock-free MPMC
//! queue, a fixed-size buffer pool and a monotonic time source.

pub mod async_ctx;
pub mod config;
pub mod log;
pub mod mpmc;
pub mod mpool;
pub mod rcache;
pub mod status;
pub mod time;

mod sync;

pub use status::{Error, Outcome, Result};
