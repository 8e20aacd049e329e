//! `fault_tcp` and `fault_posix`: the tcp and posix transports behind a wrapper that injects
//! faults, chosen from a seeded generator so a failing run repeats exactly.
//!
//! The wrapper forwards every operation to the real transport (real sockets, real shared
//! memory) and, with the probabilities configured, breaks the contract the layer above relies on
//! in the ways a real network or a dying peer does:
//!
//! | knob        | where   | what happens                                                         |
//! |-------------|---------|----------------------------------------------------------------------|
//! | `seed=N`    |         | seed of the generator (default 1); the same seed gives the same faults for the same sequence of calls |
//! | `after=N`   |         | no fault before the interface has seen N sends and arrivals (default 0), so wire-up can finish |
//! | `stall=P`   | send    | the operation is held: it returns `NoResource` without being started  |
//! | `partial=P` | send    | an `am_bcopy` is taken into the wrapper's own buffer and reported done, and reaches the transport only later, from progress or the next operation, like the tail of a short write; later operations on that endpoint return `NoResource` until it went out, and flush waits for it |
//! | `drop=P`    | send    | the endpoint's connection is dropped: the real endpoint is destroyed (the transport closes the connection once nothing else uses it; tcp may keep a socket its peer also sends on), the operation and all later ones fail with `ConnectionReset`, and the endpoint error is reported once from progress; the peer learns of it from the closed connection or its keepalive |
//! | `die=P`     | send    | the process kills itself with SIGKILL (peer death at a random point) |
//! | `delay=P`   | receive | an arriving message starts a hold: it and everything after it on this interface is delivered `hold` progress calls later, in order |
//! | `hold=N`    | receive | length of a hold in progress calls (default 50)                      |
//! | `dup=P`     | receive | an active message whose id is in `ids` is delivered twice            |
//! | `reorder=P` | receive | an active message whose id is in `ids` is delivered after the next one (or at the end of the progress call) |
//! | `ids=A-B+C` | receive | the active-message ids `dup` and `reorder` touch (default all)        |
//!
//! Probabilities are per operation or per arriving message, between 0 and 1. "Send" faults
//! apply to the data operations (active messages, put, get, atomics, tag offload), not to
//! flush, fence or pending; "receive" faults apply to what progress delivers (completions pass
//! straight through; a hold also keeps back tag-offload arrivals, so their order with active
//! messages stays).
//!
//! Configuration: `RUCX_FAULT_INJECT=seed=7,stall=0.05,dup=0.01,ids=6-11` in the environment of
//! the process, and the transport named in `RUCX_TLS` (`fault_tcp`, `fault_posix`). Without
//! `RUCX_FAULT_INJECT` the fault transports list no device, so nothing picks them by accident;
//! a malformed value makes opening the interface fail with an error naming the knob.
//!
//! Capabilities are the wrapped transport's, as data ([`FORWARDED`] says which operations the
//! wrapper forwards), plus `ERRHANDLE_PEER_FAILURE` (a dropped connection is reported).
//! Both sides of a connection must use the same fault transport name: the wrapper's addresses
//! are the wrapped transport's, under its own name.

mod iface;
#[cfg(test)]
mod tests;

pub use iface::ep::FaultEp;
pub use iface::{process_totals, FaultIface, FaultStats};

use crate::caps::{IfaceFlags, TlRoles};
use crate::iface::IfaceParams;
use crate::transport::{DeviceInfo, Transport};
use std::marker::PhantomData;
use ucs::config::ConfigVar;
use ucs::{Error, Result};

/// `RUCX_FAULT_INJECT`: the fault knobs (see the module documentation).
pub static FAULT_INJECT: ConfigVar = ConfigVar {
    name: "FAULT_INJECT",
    default: "",
    doc: "Faults the fault_tcp/fault_posix transports inject: seed=N,after=N,stall=P,partial=P,\
          drop=P,die=P,delay=P,hold=N,dup=P,reorder=P,ids=A-B+C (unset: those transports are off)",
};

/// The variable table of the fault transports.
pub static FAULT_VARS: [ConfigVar; 1] = [FAULT_INJECT];

/// Operations the wrapper forwards; the wrapped transport's other flags are dropped.
pub const FORWARDED: IfaceFlags = IfaceFlags::AM_SHORT
    .union(IfaceFlags::AM_BCOPY)
    .union(IfaceFlags::AM_ZCOPY)
    .union(IfaceFlags::PUT_SHORT)
    .union(IfaceFlags::PUT_BCOPY)
    .union(IfaceFlags::PUT_ZCOPY)
    .union(IfaceFlags::GET_SHORT)
    .union(IfaceFlags::GET_BCOPY)
    .union(IfaceFlags::GET_ZCOPY)
    .union(IfaceFlags::ATOMIC_CPU)
    .union(IfaceFlags::ATOMIC_DEVICE)
    .union(IfaceFlags::PENDING)
    .union(IfaceFlags::CONNECT_TO_IFACE)
    .union(IfaceFlags::CONNECT_TO_EP)
    .union(IfaceFlags::ERRHANDLE_PEER_FAILURE)
    .union(IfaceFlags::CB_ASYNC)
    .union(IfaceFlags::TAG_EAGER_SHORT)
    .union(IfaceFlags::TAG_EAGER_BCOPY)
    .union(IfaceFlags::TAG_EAGER_ZCOPY)
    .union(IfaceFlags::TAG_RNDV_ZCOPY);

/// The parsed fault knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Seed of the generator.
    pub seed: u64,
    /// Sends and arrivals before the first fault.
    pub after: u64,
    /// Probability that a send operation returns `NoResource`.
    pub stall: f64,
    /// Probability that an `am_bcopy` goes out later from the wrapper's buffer.
    pub partial: f64,
    /// Probability that a send operation closes the endpoint's connection.
    pub drop: f64,
    /// Probability that a send operation kills the process.
    pub die: f64,
    /// Probability that an arrival starts a hold.
    pub delay: f64,
    /// Length of a hold in progress calls.
    pub hold: u32,
    /// Probability that an active message (of `ids`) is delivered twice.
    pub dup: f64,
    /// Probability that an active message (of `ids`) is delivered after the next one.
    pub reorder: f64,
    /// Bit i set: active-message id i may be duplicated or reordered.
    pub ids: u32,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            seed: 1,
            after: 0,
            stall: 0.0,
            partial: 0.0,
            drop: 0.0,
            die: 0.0,
            delay: 0.0,
            hold: 50,
            dup: 0.0,
            reorder: 0.0,
            ids: u32::MAX,
        }
    }
}

impl FaultConfig {
    /// Parses `knob=value,knob=value…` (see the module documentation).
    pub fn parse(text: &str) -> Result<Self> {
        let mut c = FaultConfig::default();
        let bad = |what: &str| {
            Error::Config(format!(
                "RUCX_FAULT_INJECT='{text}': {what} (knobs: seed=N, after=N, stall=P, \
                 partial=P, drop=P, die=P, delay=P, hold=N, dup=P, reorder=P, ids=A-B+C)"
            ))
        };
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| bad(&format!("'{item}' is not knob=value")))?;
            let (k, v) = (k.trim(), v.trim());
            let num = || {
                v.parse::<u64>()
                    .map_err(|_| bad(&format!("{k}='{v}' is not a whole number")))
            };
            let prob = || match v.parse::<f64>() {
                Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
                _ => Err(bad(&format!("{k}='{v}' is not a probability in 0..1"))),
            };
            match k {
                "seed" => c.seed = num()?,
                "after" => c.after = num()?,
                "hold" => {
                    c.hold = u32::try_from(num()?)
                        .map_err(|_| bad(&format!("hold='{v}' is too large")))?
                }
                "stall" => c.stall = prob()?,
                "partial" => c.partial = prob()?,
                "drop" => c.drop = prob()?,
                "die" => c.die = prob()?,
                "delay" => c.delay = prob()?,
                "dup" => c.dup = prob()?,
                "reorder" => c.reorder = prob()?,
                "ids" => c.ids = parse_ids(v).map_err(|e| bad(&e))?,
                _ => return Err(bad(&format!("unknown knob '{k}'"))),
            }
        }
        Ok(c)
    }

    /// The configuration in `RUCX_FAULT_INJECT`, or `None` when it is unset.
    pub fn from_env() -> Result<Option<Self>> {
        ucs::config::register(&FAULT_VARS);
        if !FAULT_INJECT.is_set() {
            return Ok(None);
        }
        Self::parse(&FAULT_INJECT.raw()).map(Some)
    }
}

/// Parses an id set like `6-11+18+19` into a bit mask of ids below [`crate::AM_ID_MAX`].
fn parse_ids(v: &str) -> std::result::Result<u32, String> {
    let mut mask = 0u32;
    for part in v.split('+').map(str::trim) {
        let id = |s: &str| match s.trim().parse::<u8>() {
            Ok(i) if i < crate::AM_ID_MAX => Ok(i),
            _ => Err(format!(
                "ids: '{s}' is not an active-message id 0..{}",
                crate::AM_ID_MAX
            )),
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (id(a)?, id(b)?),
            None => (id(part)?, id(part)?),
        };
        if lo > hi {
            return Err(format!("ids: range '{part}' is empty"));
        }
        for i in lo..=hi {
            mask |= 1 << i;
        }
    }
    Ok(mask)
}

/// A transport the fault wrapper can wrap, with the name the wrapped form goes by.
pub trait Wrappable: Transport {
    /// Name of the wrapped transport (`fault_` and the transport's name).
    const FAULT_NAME: &'static str;
}

impl Wrappable for crate::tcp::TcpTransport {
    const FAULT_NAME: &'static str = "fault_tcp";
}

impl Wrappable for crate::mm::PosixTransport {
    const FAULT_NAME: &'static str = "fault_posix";
}

/// Transport `T` with faults injected (see the module documentation).
pub struct Fault<T>(PhantomData<T>);

impl<T: Wrappable> Transport for Fault<T> {
    const NAME: &'static str = T::FAULT_NAME;
    /// The wrapped transport's roles, except that a fault-injecting transport never joins as a
    /// wire-up helper nobody asked for: it carries traffic only where `RUCX_TLS` names it.
    const ROLES: TlRoles = T::ROLES.difference(TlRoles::WIREUP_HELPER);
    type Md = T::Md;
    type Iface = FaultIface<T::Iface>;
    type Ep = FaultEp<<T::Iface as crate::Iface>::Ep>;

    fn devices() -> std::result::Result<Vec<DeviceInfo>, String> {
        match FaultConfig::from_env() {
            Ok(Some(_)) => T::devices(),
            Ok(None) => Err(format!(
                "RUCX_FAULT_INJECT is not set (this wraps {} with injected faults)",
                T::NAME
            )),
            Err(e) => Err(e.to_string()),
        }
    }
    fn open_md(device: &str) -> Result<Self::Md> {
        T::open_md(device)
    }
    fn open_iface(md: &Self::Md, params: &IfaceParams) -> Result<Self::Iface> {
        Self::open_iface_shared(md, params, &crate::PeerProcs::new())
    }
    fn open_iface_shared(
        md: &Self::Md,
        params: &IfaceParams,
        procs: &crate::PeerProcs,
    ) -> Result<Self::Iface> {
        let cfg = FaultConfig::from_env()?.ok_or_else(|| {
            Error::Config(format!(
                "{} needs RUCX_FAULT_INJECT (for example seed=1,stall=0.01)",
                T::FAULT_NAME
            ))
        })?;
        Ok(FaultIface::new(
            T::open_iface_shared(md, params, procs)?,
            T::FAULT_NAME,
            cfg,
        ))
    }
}
