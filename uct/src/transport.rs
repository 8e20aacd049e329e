//! The trait a built-in transport implements: its name and roles, its memory-domain,
//! interface and endpoint types, its devices, and how to open them. The registry
//! ([`crate::registry`]) lists the types that implement it; this module names no transport.

use crate::caps::{DeviceType, TlRoles};
use crate::ep::Endpoint;
use crate::iface::{Iface, IfaceParams};
use crate::md::MemoryDomain;
use crate::peer_proc::PeerProcs;
use ucs::Result;

/// A device a transport can run on.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// Device name (`memory`, `memory0`, `lo`, `eth0`, `rxe0:1`).
    pub name: String,
    /// Kind of device.
    pub dev_type: DeviceType,
    /// One line of details for `rucx-info -d` (addresses, MTU, link layer…).
    pub details: String,
}

/// A built-in transport: its memory domain, interface and endpoint types, and how to open them.
pub trait Transport {
    /// Transport name as users write it in `RUCX_TLS` and `-t` (`posix`, `tcp`…).
    const NAME: &'static str;
    /// The roles this transport takes in connecting endpoints (see [`TlRoles`]).
    const ROLES: TlRoles;
    /// Whether [`AnyEp`](crate::AnyEp)'s `am_short2` inlines this transport's into its callers (a send's
    /// whole transport step in the caller's frame) instead of calling it (`am_short2_of`):
    /// for a transport whose `am_short2` is small and always inlined (shared memory).
    const INLINE_AM_SHORT2: bool = false;
    /// Memory-domain type.
    type Md: MemoryDomain;
    /// Interface type.
    type Iface: Iface<Ep = Self::Ep>;
    /// Endpoint type.
    type Ep: Endpoint;
    /// The devices this transport can use here, or why it is unavailable on this machine.
    fn devices() -> std::result::Result<Vec<DeviceInfo>, String>;
    /// Opens the memory domain serving `device`.
    fn open_md(device: &str) -> Result<Self::Md>;
    /// Opens an interface on a device of `md`, on its own.
    fn open_iface(md: &Self::Md, params: &IfaceParams) -> Result<Self::Iface>;
    /// Opens an interface on a device of `md` whose endpoints share `procs`, the peer
    /// processes of the worker it joins, with the worker's other interfaces (one watch on and
    /// one grant to each peer process per worker). Transports that hold nothing per peer
    /// process open as [`Transport::open_iface`].
    fn open_iface_shared(
        md: &Self::Md,
        params: &IfaceParams,
        procs: &PeerProcs,
    ) -> Result<Self::Iface> {
        let _ = procs;
        Self::open_iface(md, params)
    }
}
