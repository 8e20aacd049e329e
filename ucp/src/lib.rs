//! # ucp — rucx protocols
//!
//! The layer applications embed, modelled on UCX's `ucp.h`: a [`Context`] discovers the
//! transports `RUCX_TLS`/`RUCX_NET_DEVICES` allow; a [`Worker`] opens them and drives every
//! protocol from [`Worker::progress`]; endpoints are created from a peer's packed
//! [`WorkerAddress`] and pick one lane per purpose from the transports' capabilities.
//!
//! Tag matching follows MPI: per-sender order, receives matched in posting order across exact and
//! wildcard tags, an unexpected queue, and `Truncated` with the real length. Messages go eager
//! (short, bcopy, multi-fragment) or by rendezvous (get_zcopy + ATS, RTR + put_zcopy + ATP, or
//! an active-message pipeline), with thresholds computed once per endpoint configuration.

pub mod address;
pub mod config;
pub mod context;
pub mod listener;
pub mod request;
pub mod rma;
pub mod tag_match;
pub mod wire;
pub mod wireup;
pub mod worker;

pub use address::{TlAddress, WorkerAddress};
pub use config::UcpConfig;
pub use context::{Context, ContextParams, Features};
pub use listener::{ConnRequest, Listener};
pub use request::{Completion, Op, Request};
pub use rma::{MemMap, Rkey};
pub use tag_match::EXACT as TAG_MASK_EXACT;
pub use ucs::{Error, Result};
pub use worker::{
    AmHandler, AmoSize, CloseMode, EpHandle, EpParams, ErrHandler, Message, ProbeInfo, ProtoStats,
    Worker,
};
