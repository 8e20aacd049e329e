//! # perftest — the rucx benchmark
//!
//! A library behind the `perftest` binary (ucx_perftest's tests, flags and output) and
//! `rucx-info`. The client sends the test's parameters to the server over a TCP side channel
//! ([`wire`]); both sides exchange transport addresses, connect, and run the test
//! ([`uct_test`]); the client measures and prints ([`report`]).

#![warn(missing_docs)]

pub mod cli;
pub mod driver;
pub mod info;
pub mod params;
pub mod report;
pub mod timer;
pub mod ucp_test;
pub mod uct_test;
pub mod wire;

pub use cli::{Args, Mode};
pub use params::{Api, Layout, Shape, TestId, TestParams};
