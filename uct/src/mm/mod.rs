//! The shared-memory transports `posix` and `sysv` ("mm"), on device `memory`.
//!
//! Each interface owns a receive FIFO ([`fifo`]) in a segment ([`segment`]) that peers on the
//! same host map by the interface address ([`wire::IfaceAddr`]). Senders claim an element with a
//! CAS, write the message inline (short) or into the element's buffer (bcopy, zcopy), and publish
//! it; the owner polls its FIFO in `progress`. A receiver that sleeps arms a flag in the FIFO and
//! is woken through its event fd, an abstract unix datagram socket; the busy-polling path makes
//! no system call. Memory from `mem_alloc` is a shared segment too: peers map it on
//! `rkey_unpack` and do put/get/atomics with plain loads, stores and CPU atomics.
//!
//! Failures: every endpoint watches its peer process with a pidfd (one per peer process,
//! shared by all endpoints and interfaces of this process, see [`crate::peer_proc`]); a dead peer gives
//! [`ucs::Error::PeerFailure`] from data operations that find its FIFO full and one
//! `EventSink::ep_error` from progress (checked every 1024 progress calls, and whenever the
//! interface arms its event fd; the pidfds are in the event fd's epoll set, so a sleeping
//! worker wakes). A sender that dies between claiming an element and publishing it is
//! stepped over by the receiver once its stamp names a dead process. Limitation: a sender
//! that dies in the two instructions between its claim and its stamp still stalls that FIFO.
//!
//! Tag offload (`tag`): tagged messages share the FIFO with active messages; the receiving
//! interface matches them against its posted receives, copies eager payloads straight from the
//! FIFO element into the posted buffer, and serves a matched rendezvous itself (mapping the
//! sender's segment, or one `process_vm_readv`), acknowledging through the sender's FIFO.
//!
//! Trust: any process may send to a FIFO, but a peer's data segment is mapped, and its
//! ordinary memory read, only once that process has granted this one access
//! ([`crate::grant`]; creating an endpoint grants the peer). A rendezvous from ordinary memory
//! is announced for a cma read only when the receiving process said the kernel lets it trace
//! the sender; otherwise `tag_rndv_zcopy` sends nothing and the caller takes its ordinary path.
//!
//! Tests: unit tests beside each piece; `mm::conformance` (the shared suite);
//! `RUSTFLAGS="--cfg loom" cargo test -p uct --release --lib mm` (loom models of the ring);
//! multi-process tests in `tests/tests/shm_*.rs`; `tests/src/bin/shm_pingpong.rs` measures.

pub mod fifo;
mod md;
mod peer_proc;
pub mod ring;
pub mod segment;
pub mod wire;
pub mod wire_tag;

#[cfg(all(test, not(loom)))]
mod exit_tests;
pub mod iface;
pub mod keep;
pub mod peer_maps;
#[cfg(all(test, not(loom)))]
mod tests;

pub use iface::tag::MmTagCanceler;
pub use iface::{MmEp, MmIface};
pub use md::MmMd;
pub use wire::SegKind;

use crate::caps::{DeviceType, TlRoles};
use crate::iface::IfaceParams;
use crate::peer_proc::PeerProcs;
use crate::transport::{DeviceInfo, Transport};
use ucs::{Error, Result};

/// The device name of the shared-memory transports.
pub const DEVICE: &str = "memory";

fn check_device(tl: &str, device: &str) -> Result<()> {
    if device == DEVICE {
        Ok(())
    } else {
        Err(Error::NoDevice(format!(
            "transport '{tl}' has no device '{device}'; its only device is '{DEVICE}'"
        )))
    }
}

fn device_info(kind: SegKind) -> DeviceInfo {
    DeviceInfo {
        name: DEVICE.into(),
        dev_type: DeviceType::Shm,
        details: format!(
            "{} shared memory, FIFO of {} x {} B elements, {} B bcopy buffers",
            kind.name(),
            fifo::NELEMS,
            fifo::ELEM_SIZE,
            fifo::BUF_DATA_MAX
        ),
    }
}

/// The `posix` transport: memfd segments, attached through `/proc/<pid>/fd`.
pub struct PosixTransport;

impl Transport for PosixTransport {
    const NAME: &'static str = "posix";
    const ROLES: TlRoles = TlRoles::empty();
    const INLINE_AM_SHORT2: bool = true;
    type Md = MmMd;
    type Iface = MmIface;
    type Ep = MmEp;

    fn devices() -> std::result::Result<Vec<DeviceInfo>, String> {
        // SAFETY: FFI probe; the descriptor is closed at once.
        let fd = unsafe { libc::memfd_create(c"rucx-probe".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!(
                "memfd_create is not available: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: closing the probe descriptor we just opened.
        unsafe { libc::close(fd) };
        if !std::path::Path::new("/proc/self/fd").exists() {
            return Err("/proc is not mounted: peers cannot reach memfd segments".into());
        }
        Ok(vec![device_info(SegKind::Posix)])
    }
    fn open_md(device: &str) -> Result<MmMd> {
        check_device(Self::NAME, device)?;
        Ok(MmMd::new(SegKind::Posix))
    }
    fn open_iface(md: &MmMd, params: &IfaceParams) -> Result<MmIface> {
        Self::open_iface_shared(md, params, &PeerProcs::new())
    }
    fn open_iface_shared(md: &MmMd, params: &IfaceParams, procs: &PeerProcs) -> Result<MmIface> {
        check_device(Self::NAME, &params.device)?;
        MmIface::open_shared(md.kind(), &params.device, procs)
    }
}

/// The `sysv` transport: System V segments removed as soon as they are attached.
pub struct SysvTransport;

impl Transport for SysvTransport {
    const NAME: &'static str = "sysv";
    const ROLES: TlRoles = TlRoles::empty();
    const INLINE_AM_SHORT2: bool = true;
    type Md = MmMd;
    type Iface = MmIface;
    type Ep = MmEp;

    fn devices() -> std::result::Result<Vec<DeviceInfo>, String> {
        let max = std::fs::read_to_string("/proc/sys/kernel/shmmax")
            .map_err(|e| format!("cannot read /proc/sys/kernel/shmmax: {e}"))?;
        let max: u64 = max.trim().parse().unwrap_or(0);
        if max < fifo::SEG_LEN as u64 {
            return Err(format!(
                "kernel.shmmax is {max} bytes, a FIFO needs {}",
                fifo::SEG_LEN
            ));
        }
        Ok(vec![device_info(SegKind::Sysv)])
    }
    fn open_md(device: &str) -> Result<MmMd> {
        check_device(Self::NAME, device)?;
        Ok(MmMd::new(SegKind::Sysv))
    }
    fn open_iface(md: &MmMd, params: &IfaceParams) -> Result<MmIface> {
        Self::open_iface_shared(md, params, &PeerProcs::new())
    }
    fn open_iface_shared(md: &MmMd, params: &IfaceParams, procs: &PeerProcs) -> Result<MmIface> {
        check_device(Self::NAME, &params.device)?;
        MmIface::open_shared(md.kind(), &params.device, procs)
    }
}

#[cfg(all(test, not(loom)))]
mod conformance {
    crate::uct_conformance_tests!(posix, crate::testing::TlPair<crate::mm::PosixTransport>);
    crate::uct_conformance_tests!(sysv, crate::testing::TlPair<crate::mm::SysvTransport>);
}
