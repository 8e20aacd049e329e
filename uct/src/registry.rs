//! The explicit list of built-in transports, and enums that dispatch over them without boxing.
//!
//! To add a transport: implement [`Transport`] in its folder and add one line to the
//! `transports!` invocation at the bottom of this file.

use crate::caps::{EventFlags, IfaceAttr, MdAttr, TlRoles};
use crate::ep::{AtomicOp, CompletionId, Endpoint, EpId, PendingId, TagRecvId};
use crate::iface::{EventSink, Iface, IfaceParams};
use crate::md::{Iov, MemHandle, MemoryDomain, RemoteKey};
use crate::peer_proc::PeerProcs;
use crate::transport::{DeviceInfo, Transport};
use std::os::fd::RawFd;
use std::ptr::NonNull;
use ucs::{Error, Outcome, Result};

/// A transport/device pair available on this machine.
#[derive(Debug, Clone, PartialEq)]
pub struct TlResource {
    /// Transport name.
    pub tl_name: &'static str,
    /// The transport's roles in connecting endpoints ([`Transport::ROLES`]).
    pub roles: TlRoles,
    /// The device.
    pub device: DeviceInfo,
}

/// Availability of one transport: its devices, or why it is absent.
#[derive(Debug, Clone, PartialEq)]
pub struct TransportStatus {
    /// Transport name.
    pub tl_name: &'static str,
    /// Devices, or the reason the transport is unavailable.
    pub devices: std::result::Result<Vec<DeviceInfo>, String>,
}

/// The `RUCX_*` variable tables of the built-in transports, for
/// [`ucs::log::init_program`] and the configuration printer.
pub fn config_tables() -> [&'static [ucs::config::ConfigVar]; 4] {
    [
        &crate::tcp::TCP_VARS,
        &crate::rc_verbs::RC_VERBS_VARS,
        &crate::ud_verbs::UD_VERBS_VARS,
        &crate::fault::FAULT_VARS,
    ]
}

/// Every built-in transport with its devices or the reason it is unavailable.
pub fn query_transports() -> Vec<TransportStatus> {
    TRANSPORT_NAMES
        .iter()
        .map(|&tl_name| TransportStatus {
            tl_name,
            devices: devices_of(tl_name),
        })
        .collect()
}

/// Every available transport/device pair.
pub fn query_resources() -> Vec<TlResource> {
    query_transports()
        .into_iter()
        .zip(TRANSPORT_ROLES)
        .flat_map(|(t, &roles)| {
            let tl_name = t.tl_name;
            t.devices
                .unwrap_or_default()
                .into_iter()
                .map(move |device| TlResource {
                    tl_name,
                    roles,
                    device,
                })
        })
        .collect()
}

/// Opens the memory domain and interface of `tl_name` on `device`, checking both names and
/// listing the valid ones on error.
pub fn open(tl_name: &str, device: &str) -> Result<(AnyMd, AnyIface)> {
    open_shared(tl_name, device, &PeerProcs::new())
}

/// As [`open`], the interface sharing the peer processes of `procs` (a worker's, see
/// [`crate::Worker::open_iface`]).
pub fn open_shared(tl_name: &str, device: &str, procs: &PeerProcs) -> Result<(AnyMd, AnyIface)> {
    let params = IfaceParams {
        device: device.to_owned(),
        ..Default::default()
    };
    open_with(tl_name, &params, procs)
}

/// As [`open_shared`], with every interface parameter given (the device in `params`).
pub fn open_with(
    tl_name: &str,
    params: &IfaceParams,
    procs: &PeerProcs,
) -> Result<(AnyMd, AnyIface)> {
    let device = params.device.as_str();
    if !TRANSPORT_NAMES.contains(&tl_name) {
        return Err(Error::NoDevice(format!(
            "unknown transport '{tl_name}'; built-in transports are: {}",
            TRANSPORT_NAMES.join(", ")
        )));
    }
    let devices = devices_of(tl_name)
        .map_err(|why| Error::NoDevice(format!("transport '{tl_name}' is unavailable: {why}")))?;
    if !devices.iter().any(|d| d.name == device) {
        let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        return Err(Error::NoDevice(format!(
            "transport '{tl_name}' has no device '{device}'; its devices are: {}",
            names.join(", ")
        )));
    }
    let md = AnyMd::open(tl_name, device)?;
    let iface = AnyIface::open_shared(&md, params, procs)?;
    Ok((md, iface))
}

/// Polls one interface of a known type, in a function of its own: the dispatch in
/// [`AnyIface`] then stays a jump, and one transport's large progress body (its registers and
/// stack) does not weigh on the others. A transport whose `progress` begins with an inlined
/// quick look (shared memory) answers an idle poll here in a few instructions.
#[inline(never)]
fn progress_of<I: Iface, S: EventSink>(iface: &mut I, sink: &mut S) -> usize {
    iface.progress(sink)
}

/// [`progress_of`] after the transport's quick look said the poll is not idle.
#[inline(never)]
fn progress_not_idle_of<I: Iface, S: EventSink>(iface: &mut I, sink: &mut S) -> usize {
    iface.progress_not_idle(sink)
}

/// One transport's `am_short2`, in a function of its own: the dispatch in [`AnyEp`] is then
/// inlined into the caller (a jump to this function, or the body itself for a transport with
/// [`Transport::INLINE_AM_SHORT2`]), and the sending transport's body pays for its own
/// registers and stack only, not for those of every transport.
#[inline(never)]
fn am_short2_of<E: Endpoint>(
    ep: &mut E,
    id: u8,
    h0: u64,
    h1: u64,
    payload: &[u8],
) -> Result<Outcome> {
    ep.am_short2(id, h0, h1, payload)
}

macro_rules! transports {
    ($( $variant:ident => $tl:ty ),* $(,)?) => {
        /// Names of the built-in transports, in registry order.
        pub const TRANSPORT_NAMES: &[&str] = &[$(<$tl as Transport>::NAME),*];
        /// Roles of the built-in transports, in registry order.
        const TRANSPORT_ROLES: &[TlRoles] = &[$(<$tl as Transport>::ROLES),*];

        /// The roles of a built-in transport by name ([`Transport::ROLES`]); `None` for an
        /// unknown name.
        pub fn transport_roles(tl_name: &str) -> Option<TlRoles> {
            $( if tl_name == <$tl as Transport>::NAME { return Some(<$tl as Transport>::ROLES); } )*
            None
        }

        /// Devices of a transport by name.
        pub fn devices_of(tl_name: &str) -> std::result::Result<Vec<DeviceInfo>, String> {
            $( if tl_name == <$tl as Transport>::NAME { return <$tl as Transport>::devices(); } )*
            Err(format!("unknown transport '{tl_name}'"))
        }

        /// A memory domain of any built-in transport.
        pub enum AnyMd { $( #[allow(missing_docs)] $variant(<$tl as Transport>::Md), )* }
        /// An interface of any built-in transport. Unboxed although the shared-memory
        /// interface (its receive-buffer table inline) is the largest variant: a worker holds
        /// one per transport, and a box would put a pointer chase on every progress call.
        #[allow(clippy::large_enum_variant)]
        pub enum AnyIface { $( #[allow(missing_docs)] $variant(<$tl as Transport>::Iface), )* }
        /// An endpoint of any built-in transport.
        pub enum AnyEp { $( #[allow(missing_docs)] $variant(<$tl as Transport>::Ep), )* }

        impl AnyMd {
            /// Opens the memory domain of transport `tl_name` for `device`.
            pub fn open(tl_name: &str, device: &str) -> Result<Self> {
                $( if tl_name == <$tl as Transport>::NAME {
                    return Ok(AnyMd::$variant(<$tl as Transport>::open_md(device)?));
                } )*
                Err(Error::NoDevice(format!("unknown transport '{tl_name}'")))
            }
            /// The transport this domain belongs to.
            pub fn tl_name(&self) -> &'static str {
                match *self { $( AnyMd::$variant(_) => <$tl as Transport>::NAME, )* }
            }
        }

        impl AnyIface {
            /// Opens an interface of `md`'s transport.
            pub fn open(md: &AnyMd, params: &IfaceParams) -> Result<Self> {
                match *md { $( AnyMd::$variant(ref m) => Ok(AnyIface::$variant(<$tl as Transport>::open_iface(m, params)?)), )* }
            }
            /// Opens an interface of `md`'s transport sharing the peer processes of `procs`
            /// ([`Transport::open_iface_shared`]).
            pub fn open_shared(md: &AnyMd, params: &IfaceParams, procs: &PeerProcs) -> Result<Self> {
                match *md { $( AnyMd::$variant(ref m) => Ok(AnyIface::$variant(<$tl as Transport>::open_iface_shared(m, params, procs)?)), )* }
            }
        }

        impl MemoryDomain for AnyMd {
            fn name(&self) -> &'static str { match *self { $( AnyMd::$variant(ref m) => m.name(), )* } }
            fn attr(&self) -> &MdAttr { match *self { $( AnyMd::$variant(ref m) => m.attr(), )* } }
            fn mem_alloc(&self, len: usize) -> Result<MemHandle> {
                match *self { $( AnyMd::$variant(ref m) => m.mem_alloc(len), )* }
            }
            unsafe fn mem_reg(&self, addr: NonNull<u8>, len: usize) -> Result<MemHandle> {
                // SAFETY: forwarded with the caller's guarantee.
                match *self { $( AnyMd::$variant(ref m) => unsafe { m.mem_reg(addr, len) }, )* }
            }
            fn rkey_pack(&self, memh: &MemHandle, out: &mut Vec<u8>) -> Result<()> {
                match *self { $( AnyMd::$variant(ref m) => m.rkey_pack(memh, out), )* }
            }
            fn rkey_unpack(&self, packed: &[u8]) -> Result<RemoteKey> {
                match *self { $( AnyMd::$variant(ref m) => m.rkey_unpack(packed), )* }
            }
        }

        impl Iface for AnyIface {
            type Ep = AnyEp;
            fn attr(&self) -> &IfaceAttr { match *self { $( AnyIface::$variant(ref i) => i.attr(), )* } }
            fn tl_name(&self) -> &'static str { match *self { $( AnyIface::$variant(ref i) => i.tl_name(), )* } }
            fn device_name(&self) -> &str { match *self { $( AnyIface::$variant(ref i) => i.device_name(), )* } }
            fn device_address(&self) -> &[u8] { match *self { $( AnyIface::$variant(ref i) => i.device_address(), )* } }
            fn iface_address(&self) -> &[u8] { match *self { $( AnyIface::$variant(ref i) => i.iface_address(), )* } }
            fn is_reachable(&self, dev_addr: &[u8], iface_addr: Option<&[u8]>) -> std::result::Result<(), String> {
                match *self { $( AnyIface::$variant(ref i) => i.is_reachable(dev_addr, iface_addr), )* }
            }
            fn ep_create_connected(&mut self, dev_addr: &[u8], iface_addr: &[u8]) -> Result<AnyEp> {
                match *self { $( AnyIface::$variant(ref mut i) => Ok(AnyEp::$variant(i.ep_create_connected(dev_addr, iface_addr)?)), )* }
            }
            fn ep_create(&mut self) -> Result<AnyEp> {
                match *self { $( AnyIface::$variant(ref mut i) => Ok(AnyEp::$variant(i.ep_create()?)), )* }
            }
            #[inline(always)]
            fn progress<S: EventSink>(&mut self, sink: &mut S) -> usize {
                match *self { $( AnyIface::$variant(ref mut i) => progress_of(i, sink), )* }
            }
            #[inline(always)]
            fn idle_poll(&mut self) -> bool {
                match *self { $( AnyIface::$variant(ref mut i) => i.idle_poll(), )* }
            }
            #[inline(always)]
            fn progress_not_idle<S: EventSink>(&mut self, sink: &mut S) -> usize {
                match *self { $( AnyIface::$variant(ref mut i) => progress_not_idle_of(i, sink), )* }
            }
            fn ring_on_work(&mut self, bell: std::rc::Rc<dyn crate::iface::WorkBell>) -> bool {
                match *self { $( AnyIface::$variant(ref mut i) => i.ring_on_work(bell), )* }
            }
            fn flush(&mut self, comp: CompletionId) -> Result<Outcome> {
                match *self { $( AnyIface::$variant(ref mut i) => i.flush(comp), )* }
            }
            fn fence(&mut self) -> Result<()> { match *self { $( AnyIface::$variant(ref mut i) => i.fence(), )* } }
            fn event_fd(&self) -> Option<RawFd> { match *self { $( AnyIface::$variant(ref i) => i.event_fd(), )* } }
            fn wake_within(&self) -> Option<std::time::Duration> { match *self { $( AnyIface::$variant(ref i) => i.wake_within(), )* } }
            fn event_arm(&mut self, events: EventFlags) -> Result<()> {
                match *self { $( AnyIface::$variant(ref mut i) => i.event_arm(events), )* }
            }
            fn tag_recv_zcopy(&mut self, tag: u64, mask: u64, iov: &[Iov<'_>], ctx: TagRecvId) -> Result<Outcome> {
                match *self { $( AnyIface::$variant(ref mut i) => i.tag_recv_zcopy(tag, mask, iov, ctx), )* }
            }
            fn tag_recv_cancel(&mut self, ctx: TagRecvId, force: bool) -> Result<()> {
                match *self { $( AnyIface::$variant(ref mut i) => i.tag_recv_cancel(ctx, force), )* }
            }
            fn tag_recv_canceler(&self) -> Option<crate::iface::TagRecvCanceler> {
                match *self { $( AnyIface::$variant(ref i) => i.tag_recv_canceler(), )* }
            }
        }

        impl Endpoint for AnyEp {
            fn id(&self) -> EpId { match *self { $( AnyEp::$variant(ref e) => e.id(), )* } }
            #[inline]
            fn am_short(&mut self, id: u8, header: u64, payload: &[u8]) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.am_short(id, header, payload), )* }
            }
            #[inline(always)]
            fn am_short2(&mut self, id: u8, h0: u64, h1: u64, payload: &[u8]) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => if <$tl as Transport>::INLINE_AM_SHORT2 {
                    e.am_short2(id, h0, h1, payload)
                } else {
                    am_short2_of(e, id, h0, h1, payload)
                }, )* }
            }
            fn am_short_iov(&mut self, id: u8, iov: &[&[u8]]) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.am_short_iov(id, iov), )* }
            }
            #[inline]
            fn am_bcopy<F: FnOnce(&mut [u8]) -> usize>(&mut self, id: u8, pack: F) -> Result<Outcome<usize>> {
                match *self { $( AnyEp::$variant(ref mut e) => e.am_bcopy(id, pack), )* }
            }
            fn am_zcopy(&mut self, id: u8, header: &[u8], iov: &[Iov<'_>], comp: CompletionId) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.am_zcopy(id, header, iov, comp), )* }
            }
            fn put_short(&mut self, data: &[u8], remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.put_short(data, remote_addr, rkey), )* }
            }
            fn put_bcopy<F: FnOnce(&mut [u8]) -> usize>(&mut self, pack: F, remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome<usize>> {
                match *self { $( AnyEp::$variant(ref mut e) => e.put_bcopy(pack, remote_addr, rkey), )* }
            }
            fn put_zcopy(&mut self, iov: &[Iov<'_>], remote_addr: u64, rkey: &RemoteKey, comp: CompletionId) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.put_zcopy(iov, remote_addr, rkey, comp), )* }
            }
            fn get_short(&mut self, buf: &mut [u8], remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.get_short(buf, remote_addr, rkey), )* }
            }
            fn get_bcopy(&mut self, len: usize, remote_addr: u64, rkey: &RemoteKey, comp: CompletionId, unpack: &mut dyn FnMut(&[u8])) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.get_bcopy(len, remote_addr, rkey, comp, unpack), )* }
            }
            fn get_zcopy(&mut self, iov: &[Iov<'_>], remote_addr: u64, rkey: &RemoteKey, comp: CompletionId) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.get_zcopy(iov, remote_addr, rkey, comp), )* }
            }
            fn peer_rkey_unpack(&mut self, packed: &[u8]) -> Result<Option<RemoteKey>> {
                match *self { $( AnyEp::$variant(ref mut e) => e.peer_rkey_unpack(packed), )* }
            }
            fn atomic32_post(&mut self, op: AtomicOp, value: u32, remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.atomic32_post(op, value, remote_addr, rkey), )* }
            }
            fn atomic64_post(&mut self, op: AtomicOp, value: u64, remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.atomic64_post(op, value, remote_addr, rkey), )* }
            }
            fn atomic32_fetch(&mut self, op: AtomicOp, value: u32, remote_addr: u64, rkey: &RemoteKey, comp: CompletionId) -> Result<Outcome<u32>> {
                match *self { $( AnyEp::$variant(ref mut e) => e.atomic32_fetch(op, value, remote_addr, rkey, comp), )* }
            }
            fn atomic64_fetch(&mut self, op: AtomicOp, value: u64, remote_addr: u64, rkey: &RemoteKey, comp: CompletionId) -> Result<Outcome<u64>> {
                match *self { $( AnyEp::$variant(ref mut e) => e.atomic64_fetch(op, value, remote_addr, rkey, comp), )* }
            }
            fn atomic_cswap32(&mut self, compare: u32, swap: u32, remote_addr: u64, rkey: &RemoteKey, comp: CompletionId) -> Result<Outcome<u32>> {
                match *self { $( AnyEp::$variant(ref mut e) => e.atomic_cswap32(compare, swap, remote_addr, rkey, comp), )* }
            }
            fn atomic_cswap64(&mut self, compare: u64, swap: u64, remote_addr: u64, rkey: &RemoteKey, comp: CompletionId) -> Result<Outcome<u64>> {
                match *self { $( AnyEp::$variant(ref mut e) => e.atomic_cswap64(compare, swap, remote_addr, rkey, comp), )* }
            }
            fn flush(&mut self, comp: CompletionId) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.flush(comp), )* }
            }
            fn fence(&mut self) -> Result<()> { match *self { $( AnyEp::$variant(ref mut e) => e.fence(), )* } }
            fn check(&mut self) -> Result<()> { match *self { $( AnyEp::$variant(ref mut e) => e.check(), )* } }
            fn pending_add(&mut self, req: PendingId) -> Result<()> {
                match *self { $( AnyEp::$variant(ref mut e) => e.pending_add(req), )* }
            }
            fn pending_purge(&mut self, f: &mut dyn FnMut(PendingId)) {
                match *self { $( AnyEp::$variant(ref mut e) => e.pending_purge(f), )* }
            }
            fn ep_address(&self) -> Result<Vec<u8>> { match *self { $( AnyEp::$variant(ref e) => e.ep_address(), )* } }
            fn connect_to_ep(&mut self, dev_addr: &[u8], ep_addr: &[u8]) -> Result<()> {
                match *self { $( AnyEp::$variant(ref mut e) => e.connect_to_ep(dev_addr, ep_addr), )* }
            }
            fn tag_eager_short(&mut self, tag: u64, data: &[u8]) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.tag_eager_short(tag, data), )* }
            }
            fn tag_eager_bcopy<F: FnOnce(&mut [u8]) -> usize>(&mut self, tag: u64, imm: u64, pack: F) -> Result<Outcome<usize>> {
                match *self { $( AnyEp::$variant(ref mut e) => e.tag_eager_bcopy(tag, imm, pack), )* }
            }
            fn tag_eager_zcopy(&mut self, tag: u64, imm: u64, iov: &[Iov<'_>], comp: CompletionId) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.tag_eager_zcopy(tag, imm, iov, comp), )* }
            }
            fn tag_rndv_zcopy(&mut self, tag: u64, header: &[u8], iov: &[Iov<'_>], comp: CompletionId) -> Result<Outcome<u64>> {
                match *self { $( AnyEp::$variant(ref mut e) => e.tag_rndv_zcopy(tag, header, iov, comp), )* }
            }
            fn tag_rndv_cancel(&mut self, op: u64) -> Result<()> {
                match *self { $( AnyEp::$variant(ref mut e) => e.tag_rndv_cancel(op), )* }
            }
            fn tag_rndv_request(&mut self, tag: u64, header: &[u8]) -> Result<Outcome> {
                match *self { $( AnyEp::$variant(ref mut e) => e.tag_rndv_request(tag, header), )* }
            }
        }
    };
}

// The built-in transports, in the order they are listed and preferred among equals.
transports! {
    SelfTl => crate::self_::SelfTransport,
    Posix => crate::mm::PosixTransport,
    Sysv => crate::mm::SysvTransport,
    Cma => crate::cma::CmaTransport,
    Tcp => crate::tcp::TcpTransport,
    RcVerbs => crate::rc_verbs::RcVerbs,
    UdVerbs => crate::ud_verbs::UdVerbs,
    FaultTcp => crate::fault::Fault<crate::tcp::TcpTransport>,
    FaultPosix => crate::fault::Fault<crate::mm::PosixTransport>,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::caps::{DeviceType, IfaceFlags};

    /// Every transport's declared roles agree with the connection flags its interfaces
    /// announce, for every transport this machine can open. rc_verbs needs an RDMA device: run
    /// the uct test binary with the filter `registry::tests` in `tests/rdma-vm/run.sh`.
    #[test]
    fn declared_roles_match_interface_flags() {
        let mut checked = Vec::new();
        for t in query_transports() {
            let Ok(devices) = t.devices else {
                eprintln!("note: {} not checked: unavailable here", t.tl_name);
                continue;
            };
            let roles = transport_roles(t.tl_name).expect("a registry name has roles");
            for d in devices {
                let (_md, iface) = open(t.tl_name, &d.name).unwrap_or_else(|e| {
                    panic!("{}/{} is listed but does not open: {e}", t.tl_name, d.name)
                });
                let f = iface.attr().flags;
                let ep_only = f.contains(IfaceFlags::CONNECT_TO_EP)
                    && !f.contains(IfaceFlags::CONNECT_TO_IFACE);
                assert_eq!(
                    roles.contains(TlRoles::NEEDS_WIREUP_HELPER),
                    ep_only,
                    "{}/{}: NEEDS_WIREUP_HELPER with flags {f:?}",
                    t.tl_name,
                    d.name
                );
                if roles.contains(TlRoles::WIREUP_HELPER) {
                    assert!(
                        f.contains(IfaceFlags::CONNECT_TO_IFACE) && d.dev_type == DeviceType::Net,
                        "{}/{}: a wire-up helper must connect to interfaces over a network \
                         device (flags {f:?}, device {})",
                        t.tl_name,
                        d.name,
                        d.dev_type
                    );
                }
                checked.push(t.tl_name);
            }
        }
        assert!(
            checked.contains(&"tcp"),
            "tcp on lo exists everywhere: {checked:?}"
        );
        assert!(checked.contains(&"self"), "{checked:?}");
    }

    #[test]
    fn resources_carry_their_transport_roles() {
        for r in query_resources() {
            assert_eq!(Some(r.roles), transport_roles(r.tl_name), "{}", r.tl_name);
        }
        assert_eq!(transport_roles("no_such_tl"), None);
    }
}
