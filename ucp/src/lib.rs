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
//! an active-message pipeline), with thresholds computed once per endpoint configuration
//! (`RUCX_PROTO_INFO=y` prints each endpoint's table; `RUCX_RNDV_THRESH`, `RUCX_RNDV_SCHEME`
//! and `RUCX_RNDV_AM_MAX` override the choice).
//!
//! ## Wire-up
//! Every transport connects to an interface address, so an endpoint is one-way. Its first message
//! carries the sender's packed worker address; the receiver creates the reverse endpoint it
//! replies on (sync acks, ATS/RTR/ATP, atomic replies, keepalive). Every ucp message starts with
//! the sender's worker uuid, which names the endpoint a message (or a malformed header) belongs to.
//! rc_verbs connects endpoint to endpoint: its endpoint addresses are swapped over the tcp lane
//! after that first message, and then the AM and RMA lanes move to rc_verbs behind an ordering
//! marker (see [`wireup`]), so tcp carries only the wire-up.
//!
//! ## Requests
//! A non-blocking call gives an [`Op`]: finished at once, or a [`Request`] to finish through its
//! worker. Handles ([`EpHandle`], [`Request`], [`Message`]) belong to the worker that made them;
//! any other worker answers them with `InvalidParam` and touches nothing. Results are typed per
//! operation: [`Completion::into_recv`] gives a receive's [`Received`] buffer, length and tag,
//! [`Completion::into_value`] a fetching atomic's value, [`Completion::into_result`] the status
//! of the rest; [`Worker::wait_recv`], [`Worker::wait_fetch`] and [`Worker::wait_done`] wait and
//! convert at once. [`Worker::wait`] spins, then sleeps on the worker's event fd (with
//! [`Features::WAKEUP`]); [`Worker::wait_timeout`] gives the request back when time runs out.
//! Dropping a `Request` releases it: the worker lets it run to its end and then frees its slot
//! and buffer. Under an async runtime, [`OpFuture`] awaits an operation of a worker shared as
//! `Rc<RefCell<Worker>>`; the `progress()` call that finishes it wakes the task (the
//! `ucp_tokio` example drives the worker from its event fd with tokio).
//!
//! ## Layout
//! [`worker`] holds the [`Worker`] and its core: the records of endpoints (`worker::ep`) and
//! requests (`worker::req`), the public handle and handler types, and `worker::state::State`
//! (endpoints, the request table, the progress and pending queues, the clock, the
//! configuration, and one state struct per family), with the machinery around it (endpoints,
//! requests, progress, pending queues, the incoming-message dispatch, flush, close, failure and
//! keepalive). Each protocol family has a module with its public calls and the handlers of its
//! wire messages, keeps its per-worker state in a struct of its own in a module that names no
//! `State` (`tag::state::TagState`: the [`tag_match::TagMatcher`] that keeps MPI ordering, the
//! unexpected messages and tag offload's `TmState`; `rndv::RndvState`: the reads in progress;
//! `amo::state::AmoState`; `am::state::AmState`: the handlers), and defines its request
//! stages (`tag::stages`, `rndv::stages`, `stream::stages`, `am::stages`), which the core's
//! `SendStage`/`RecvStage`/`ReqKind` hold (naming only the stages a request starts in).
//! [`rma`], `stream` and [`wireup`] are families too. A family's code runs on the core
//! (`impl Core`: stream, RMA, wire-up) or on a view the worker lends for one call
//! (`worker::state::Family`: tag, rendezvous, AM, atomics), which reaches the core's methods
//! of `worker::core_api` (endpoints, lanes, requests, progress queues, counters), the
//! family's own state, and the rendezvous family's view for the families that start
//! rendezvous; nothing else (the compiler checks it). The modules have no cycle
//! (ARCHITECTURE.md).
//! [`wire`] defines every message's header, and [`mt`] runs a worker for many threads.

#![warn(missing_docs)]

pub mod acceptor;
pub mod address;
mod am;
pub mod am_desc;
mod amo;
pub mod cm_client;
pub mod config;
pub mod context;
mod ep_info;
pub mod future;
pub mod listener;
pub mod mt;
pub mod request;
pub mod rma;
mod rndv;
mod stream;
mod tag;
#[cfg(test)]
mod test_pair;
pub use tag::matcher as tag_match;
pub mod wire;
pub mod wireup;
pub mod worker;

pub use address::{TlAddress, WorkerAddress};
pub use am::inbox::{AmArrival, LentAm, SmallAm, SmallSlot, SmallTaken, SMALL_AM_MAX};
pub use am_desc::{AmMsg, AmRndv};
pub use amo::AmoStart;
pub use cm_client::{ConnectPoll, Connecting};
pub use config::UcpConfig;
pub use context::{Context, ContextParams, Features};
pub use future::OpFuture;
pub use listener::{ConnRequest, Listener};
pub use mt::{MtAmHandler, MtErrHandler, MtMem, MtRequest, MtWorker};
pub use request::{Completion, HookedOp, Op, Received, Request, RequestId};
pub use rma::{MemMap, Rkey};
pub use stream::StreamRecvNow;
pub use tag_match::EXACT as TAG_MASK_EXACT;
pub use ucs::{Error, Result};
pub use wireup::TagSendMode;
pub use worker::state::{QUEUED_AM, QUEUED_RECV_OK};
pub use worker::{
    AmHandler, AmoSize, CloseMode, EpHandle, EpParams, ErrHandler, Message, ProbeInfo, ProtoStats,
    RecvOk, RequestCallback, Worker, CLOCK_PERIOD,
};
