#![warn(missing_docs)]
//! # uct — rucx transports
//!
//! The transport layer, modelled on UCX's `uct.h`: memory domains ([`MemoryDomain`]),
//! interfaces ([`Iface`]) and endpoints ([`Endpoint`]) behind one trait set, implemented by the
//! built-in transports listed in [`registry`]. Data operations never block; results and received
//! messages come back through an [`EventSink`] during [`Iface::progress`].

pub mod caps;
pub mod cma;
mod cpu_atomic;
pub mod ep;
pub mod fault;
pub mod grant;
pub mod held;
pub mod iface;
pub mod md;
pub mod mm;
pub mod peer_proc;
pub mod prefetch;
pub mod rc_verbs;
pub mod registry;
pub mod self_;
mod small_copy;
pub mod tag_posted;
pub mod tcp;
#[doc(hidden)]
pub mod testing;
pub mod transport;
pub mod ud_verbs;
mod unix_addr;
pub mod worker;

pub use caps::{
    AtomicCaps, AtomicOps, DeviceType, EventFlags, IfaceAttr, IfaceFlags, MdAttr, MdFlags,
    OpLimits, PerfModel, TagLimits, TlRoles,
};
pub use ep::{
    check_am_id, check_len, AtomicOp, CompletionId, Endpoint, EpId, PendingId, TagRecvId, AM_ID_MAX,
};
pub use held::{AmKeep, HeldBuf};
pub use iface::{
    AmHandlers, EventSink, Iface, IfaceParams, RndvRemote, TagRecvCancel, TagRecvCanceler, WorkBell,
};
pub use md::{Iov, MemHandle, MemoryDomain, RemoteKey};
pub use peer_proc::PeerProcs;
pub use prefetch::{prefetch_read, PrefetchW};
pub use registry::{
    config_tables, open, open_shared, open_with, query_resources, query_transports,
    transport_roles, AnyEp, AnyIface, AnyMd, TlResource, TRANSPORT_NAMES,
};
pub use transport::{DeviceInfo, Transport};
pub use ucs::{Error, Outcome, Result};
pub use worker::{IfaceId, Worker};
