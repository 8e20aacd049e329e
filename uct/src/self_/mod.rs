//! The **self** transport: loopback inside one process.
//!
//! Device `memory0`, memory domain `self`. Every operation of the API except tag offload:
//! active messages are copied into the target interface's bounded ring of pooled receive
//! buffers and handed to the sink during that interface's progress (a full ring gives
//! `NoResource`, and the pending queue is retried when it drains); put, get and atomics act at
//! once, with memcpy and CPU atomics, on the local memory a self remote key maps.
//!
//! A self endpoint reaches any self interface of the same thread: its own (true loopback) or
//! another worker's. Remote keys are valid only in the process that packed them.

mod iface;
mod md;
pub mod wire;

pub use iface::ep::SelfEp;
pub use iface::{SelfIface, DEVICE_NAME, MAX_AM_HDR, MAX_IOV, RX_RING_LEN, SEG_SIZE};
pub use md::SelfMd;

use crate::caps::{DeviceType, TlRoles};
use crate::iface::IfaceParams;
use crate::transport::{DeviceInfo, Transport};
use ucs::{Error, Result};

/// Transport name.
pub const TL_NAME: &str = "self";

/// The self transport.
#[derive(Debug, Clone, Copy, Default)]
pub struct SelfTransport;

impl Transport for SelfTransport {
    const NAME: &'static str = TL_NAME;
    const ROLES: TlRoles = TlRoles::empty();
    type Md = SelfMd;
    type Iface = SelfIface;
    type Ep = SelfEp;

    fn devices() -> std::result::Result<Vec<DeviceInfo>, String> {
        Ok(vec![DeviceInfo {
            name: DEVICE_NAME.to_owned(),
            dev_type: DeviceType::SelfLoop,
            details: format!(
                "loopback inside process {}; {RX_RING_LEN} receive buffers of {SEG_SIZE} bytes",
                std::process::id()
            ),
        }])
    }

    fn open_md(device: &str) -> Result<SelfMd> {
        if device != DEVICE_NAME {
            return Err(Error::NoDevice(format!(
                "self has no device '{device}'; its only device is '{DEVICE_NAME}'"
            )));
        }
        Ok(SelfMd::new())
    }

    fn open_iface(_md: &SelfMd, params: &IfaceParams) -> Result<SelfIface> {
        SelfIface::open(params)
    }
}

#[cfg(test)]
mod tests;
