//! Interface and endpoint of the shared-memory transports.

use super::fifo::{self, FifoPtrs, Polled, BUF_DATA_MAX, INLINE_MAX};
use super::keep::RxBufs;
use super::peer_proc::{MmPeer, MmPeers};
use super::segment::Segment;
use super::wire::{DeviceAddr, IfaceAddr, SegKind};
use crate::caps::{
    AtomicCaps, AtomicOps, EventFlags, IfaceAttr, IfaceFlags, OpLimits, PerfModel, TagLimits,
};
use crate::cpu_atomic::{self, reject_post_swap};
use crate::ep::{
    check_am_id, check_len, AtomicOp, CompletionId, Endpoint, EpId, PendingId, TagRecvId,
};
use crate::iface::{EventSink, Iface};
use crate::md::{Iov, RemoteKey};
use crate::peer_proc::watch::EpollPeers;
use crate::peer_proc::PeerProcs;
pub(crate) use crate::peer_proc::PeerWatch;
pub use ep::MmEp;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use ucs::{Error, Outcome, Result};

/// Largest user header of `am_zcopy`.
pub const AM_MAX_HDR: usize = 128;
/// Largest iov count of zcopy operations.
pub const MAX_IOV: usize = 16;
/// Largest `put_short` / `get_short`.
pub const RMA_MAX_SHORT: usize = 4096;
/// Largest `put_bcopy` / `get_bcopy`.
pub const RMA_MAX_BCOPY: usize = 8192;
// A pack into a peer's mapped memory may run RMA_MAX_BCOPY bytes from any start in a region.
const _: () = assert!(super::segment::SCRATCH_TAIL >= RMA_MAX_BCOPY);
/// Largest `put_zcopy` / `get_zcopy`.
pub const RMA_MAX_ZCOPY: usize = 1 << 30;
mod ep;
pub mod tag;

use tag::TagState;

/// Messages consumed per progress call at most.
const POLL_BATCH: usize = 32;
/// Progress calls between two checks of the peers' liveness.
const PEER_CHECK_INTERVAL: u32 = 1024;
/// The shortest time between two looks at the peers and the grant listener.
const PEER_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_millis(1);
/// Empty progress calls between two looks at a FIFO that may be stalled by a dead sender (a
/// multiple of [`PEER_CHECK_INTERVAL`]: progress's quick look checks that one only).
const STALL_CHECK_INTERVAL: u32 = 1 << 16;
const _: () = assert!(STALL_CHECK_INTERVAL.is_multiple_of(PEER_CHECK_INTERVAL));

fn attr() -> IfaceAttr {
    let rma = |max_short| OpLimits {
        max_short,
        max_bcopy: RMA_MAX_BCOPY,
        min_zcopy: 0,
        max_zcopy: RMA_MAX_ZCOPY,
        max_iov: MAX_IOV,
        max_hdr: 0,
    };
    IfaceAttr {
        flags: IfaceFlags::AM_SHORT
            | IfaceFlags::AM_BCOPY
            | IfaceFlags::AM_ZCOPY
            | IfaceFlags::PUT_SHORT
            | IfaceFlags::PUT_BCOPY
            | IfaceFlags::PUT_ZCOPY
            | IfaceFlags::GET_SHORT
            | IfaceFlags::GET_BCOPY
            | IfaceFlags::GET_ZCOPY
            | IfaceFlags::ATOMIC_CPU
            | IfaceFlags::PENDING
            | IfaceFlags::CONNECT_TO_IFACE
            | IfaceFlags::ERRHANDLE_PEER_FAILURE
            | IfaceFlags::TAG_EAGER_SHORT
            | IfaceFlags::TAG_EAGER_BCOPY
            | IfaceFlags::TAG_EAGER_ZCOPY
            | IfaceFlags::TAG_RNDV_ZCOPY,
        event_flags: EventFlags::RECV | EventFlags::SEND_COMP | EventFlags::FD,
        atomics: AtomicCaps {
            op32: AtomicOps::POST_ALL,
            fop32: AtomicOps::FETCH_ALL,
            op64: AtomicOps::POST_ALL,
            fop64: AtomicOps::FETCH_ALL,
        },
        am: OpLimits {
            max_short: INLINE_MAX,
            max_bcopy: BUF_DATA_MAX,
            min_zcopy: 0,
            max_zcopy: BUF_DATA_MAX - AM_MAX_HDR,
            max_iov: MAX_IOV,
            max_hdr: AM_MAX_HDR,
        },
        put: rma(RMA_MAX_SHORT),
        get: rma(RMA_MAX_SHORT),
        tag: TagLimits {
            eager_max_short: tag::EAGER_MAX_SHORT,
            eager_max_bcopy: tag::EAGER_MAX_BCOPY,
            eager_max_zcopy: tag::EAGER_MAX_BCOPY,
            rndv_max_hdr: tag::RNDV_MAX_HDR,
            rndv_max_zcopy: tag::RNDV_MAX_ZCOPY,
            recv_max_outstanding: tag::MAX_POSTED,
            recv_max_iov: tag::RECV_MAX_IOV,
            // One copy out of the FIFO element either way.
            eager_saves_copy: false,
        },
        device_addr_len: DeviceAddr::LEN,
        iface_addr_len: IfaceAddr::LEN,
        ep_addr_len: 0,
        // From tests/src/bin/shm_pingpong.rs between two processes pinned to two cores
        // (typical values): 8-byte am_short costs the sender 0.043 us per message when
        // streaming, the ping-pong half round trip is 0.165 us, and 8 KiB bcopy messages
        // stream at well over 12 GB/s (the figure here is the conservative one).
        perf: PerfModel {
            send_overhead: 40e-9,
            recv_overhead: 20e-9,
            bandwidth: 12e9,
            latency: 105e-9,
        },
        priority: 0,
    }
}

/// The abstract socket address of the wake-up socket of the interface at `peer` (the name
/// [`IfaceAddr::socket_name`] gives), built on the stack: waking a peer allocates nothing, and
/// endpoints keep no copy of it.
pub(super) fn wake_addr(peer: &IfaceAddr) -> (libc::sockaddr_un, libc::socklen_t) {
    use std::io::Write;
    let mut name = [0u8; 64];
    let mut w = &mut name[..];
    // "rucx-mm-" + 10 pid digits + "-" + 16 hex digits fit 64 bytes.
    let _ = write!(w, "rucx-mm-{}-{:016x}", peer.seg.pid, peer.nonce);
    let n = 64 - w.len();
    crate::unix_addr::abstract_addr(&name[..n])
}

/// Sends a one-byte wake-up from `sock` to the interface at `peer`. A full socket already wakes
/// the receiver, and a gone receiver is found by the peer watch, so errors are ignored.
pub(super) fn wake_peer(sock: &OwnedFd, peer: &IfaceAddr) {
    let (addr, len) = wake_addr(peer);
    let b = 0u8;
    // SAFETY: FFI with a valid one-byte buffer and a valid address of `len` bytes.
    unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            &b as *const u8 as *const libc::c_void,
            1,
            libc::MSG_DONTWAIT,
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        );
    }
}

/// State an endpoint shares with its interface (single-threaded, like the worker). One per
/// endpoint: a hub with an endpoint to each of many peers holds one per peer, so it keeps no
/// copies of what its segment already knows (the FIFO's address, the peer's segment reference).
pub(super) struct EpShared {
    id: EpId,
    /// The peer's FIFO segment, mapped (see [`EpShared::remote`]).
    pub(super) _seg: Segment,
    /// The interface's own cache of the peer's tail, for pending dispatch and the
    /// interface's own messages to the peer (rendezvous acknowledgements).
    pub(super) iface_tail: Cell<u64>,
    /// The nonce of the peer interface's address (the rest is `_seg`'s reference; see
    /// [`EpShared::peer_addr`]).
    peer_nonce: u64,
    /// Requests waiting for room in the peer's FIFO, in order; allocated at the first one.
    pub(super) pending: PendingQueue,
    pub(super) failed: Cell<bool>,
    reported: Cell<bool>,
    /// Set by every message written into the peer's FIFO, cleared when a flush asks the
    /// kernel whether the peer is alive (see the endpoint's `flush`).
    pub(super) sent_unchecked: Cell<bool>,
    /// The peer process, shared with the interface's other endpoints to it.
    pub(super) peer: Rc<MmPeer>,
    /// The peer process said it may trace us (it reads our ordinary memory with cma); once
    /// true it stays true, so the sender asks the grant registry only until then.
    peer_reads_us: Cell<bool>,
}

// With its reference counts, 120 bytes: one 128-byte heap chunk per endpoint.
const _: () = assert!(std::mem::size_of::<EpShared>() <= 104);

/// An endpoint's queue of pending requests: empty and unallocated until a send finds the peer's
/// FIFO full (most endpoints never do).
///
/// Boxed on purpose: an empty `VecDeque` is 32 bytes in every endpoint, the box 8.
#[derive(Default)]
#[allow(clippy::box_collection)]
pub(super) struct PendingQueue(RefCell<Option<Box<VecDeque<PendingId>>>>);

impl PendingQueue {
    pub(super) fn is_empty(&self) -> bool {
        self.0.borrow().as_ref().is_none_or(|q| q.is_empty())
    }

    pub(super) fn len(&self) -> usize {
        self.0.borrow().as_ref().map_or(0, |q| q.len())
    }

    pub(super) fn push_back(&self, req: PendingId) {
        self.0.borrow_mut().get_or_insert_default().push_back(req);
    }

    pub(super) fn push_front(&self, req: PendingId) {
        self.0.borrow_mut().get_or_insert_default().push_front(req);
    }

    pub(super) fn pop_front(&self) -> Option<PendingId> {
        self.0.borrow_mut().as_mut()?.pop_front()
    }

    /// Empties the queue, giving what it held in order.
    pub(super) fn take_all(&self) -> VecDeque<PendingId> {
        self.0.borrow_mut().take().map(|q| *q).unwrap_or_default()
    }
}

impl EpShared {
    /// Marks the endpoint failed (once; its peer process exited): counted for reporting, and
    /// the process's pidfd leaves the interface's epoll set so a sleeper is not woken again and
    /// again.
    fn mark_failed(&self, common: &Common) {
        if self.failed.replace(true) {
            return;
        }
        common.unreported.set(common.unreported.get() + 1);
        common.exits_unnoted.set(true);
        // The process exited: every endpoint to it fails, none needs its pidfd any more.
        self.peer.unwatch();
    }

    /// The peer's FIFO.
    #[inline(always)]
    pub(super) fn remote(&self) -> FifoPtrs {
        // SAFETY: `_seg` maps SEG_LEN bytes (checked when attached) and lives as long as `self`.
        unsafe { FifoPtrs::new(self._seg.base().as_ptr()) }
    }

    /// The peer interface's address (also names its wake-up socket, see [`wake_addr`]).
    pub(super) fn peer_addr(&self) -> IfaceAddr {
        IfaceAddr {
            seg: self._seg.seg_ref(),
            nonce: self.peer_nonce,
        }
    }

    /// The peer's process id.
    pub(super) fn peer_pid(&self) -> u32 {
        self._seg.seg_ref().pid
    }

    fn peer_error(&self) -> Error {
        Error::PeerFailure(format!(
            "shared-memory peer process {} has exited",
            self.peer_pid()
        ))
    }
}

/// State shared between an interface and its endpoints.
pub(crate) struct Common {
    /// The event fd: an epoll set of the wake-up socket and the peers' pidfds, so a sleeper
    /// wakes for messages and for a peer's death (made when first asked for).
    peers: Rc<EpollPeers>,
    /// Requests queued on all endpoints.
    pending_total: Cell<usize>,
    /// Endpoints found failed but not yet reported.
    unreported: Cell<usize>,
    /// A peer's exit was found since the interface last noted how far its FIFO was claimed
    /// (see [`MmIface::exit_drain_to`]).
    exits_unnoted: Cell<bool>,
    /// Tag offload: posted receives, rendezvous operations, deferred tag events.
    pub(super) tag: RefCell<TagState>,
    /// Deferred tag events wait for progress.
    pub(super) tag_work: Cell<bool>,
    /// This interface's address (where rendezvous acknowledgements come back to).
    pub(super) self_addr: IfaceAddr,
    /// Progress calls that consumed messages from this interface's FIFO so far. An endpoint
    /// that finds it unchanged since its previous send is streaming (sending without waiting
    /// for replies) and prefetches its next element (see [`MmEp::send`]).
    pub(super) rx_rounds: Cell<u16>,
    /// The wake-up socket (the interface's `sock`), which endpoints send wake-ups from.
    pub(super) sock: Rc<OwnedFd>,
    /// put_bcopy packs here when the remote range is shorter than max_bcopy (one buffer for
    /// all endpoints of the interface: they run on its thread, one call at a time).
    pub(super) bounce: RefCell<Box<[u8]>>,
}

/// An interface of `posix` or `sysv`: owns the receive FIFO.
pub struct MmIface {
    kind: SegKind,
    attr: IfaceAttr,
    device: String,
    dev_addr: Vec<u8>,
    local_dev: DeviceAddr,
    iface_addr: Vec<u8>,
    pub(super) fifo: FifoPtrs,
    /// Which buffer each element has, the free spares, and the segment (see `keep`).
    bufs: RxBufs,
    pub(super) read_pos: u64,
    released: u64,
    /// A call that consumed messages returned before its release and checks (see
    /// `progress_busy`): the next call runs them, and does not return early itself.
    checks_owed: bool,
    /// A position found claimed but unpublished at the last stall check.
    stalled_at: Option<u64>,
    /// Bound to our abstract name: the event fd, and the socket we send wake-ups from.
    pub(super) sock: Rc<OwnedFd>,
    pub(super) eps: Vec<Weak<EpShared>>,
    /// The worker's peer processes (shared with its other interfaces).
    procs: PeerProcs,
    /// The processes `eps` reach, with their place in our epoll set.
    peers: MmPeers,
    pub(super) common: Rc<Common>,
    next_ep: u32,
    tick: u32,
    /// When the peers and grants were last looked at (see [`PEER_CHECK_PERIOD`]).
    last_check: std::time::Instant,
    /// How far the FIFO was claimed when a peer's exit was last noted: an exited peer's
    /// messages all lie below, and its endpoint's error is reported only once they have been
    /// read (so the error comes after them, as a closed connection's end comes after its data;
    /// the layer above would otherwise see the failure first and find the peer's last
    /// messages arriving for a failed endpoint).
    exit_drain_to: u64,
}

impl MmIface {
    /// Opens an interface with a fresh FIFO segment of `kind`, on its own (its peer processes
    /// shared with no other interface).
    pub fn open(kind: SegKind, device: &str) -> Result<Self> {
        Self::open_shared(kind, device, &PeerProcs::new())
    }

    /// Opens an interface with a fresh FIFO segment of `kind`, whose endpoints share the peer
    /// processes of `procs` (the worker's) with the worker's other interfaces.
    pub fn open_shared(kind: SegKind, device: &str, procs: &PeerProcs) -> Result<Self> {
        // Peers grant us access to their segments through our grant socket. Without it (the
        // name is taken) messages still flow, but mapping peers' memory is refused.
        let _ = crate::grant::listen();
        let seg = Segment::create(kind, fifo::SEG_LEN)?;
        // SAFETY: the segment is SEG_LEN bytes, page aligned, and lives in `self._seg` as long as
        // the view; nobody else knows it yet, so init may write it.
        let fifo = unsafe { FifoPtrs::new(seg.base().as_ptr()) };
        let pid = std::process::id();
        // SAFETY: as above.
        unsafe { fifo.init(pid) };

        static NONCE: AtomicU64 = AtomicU64::new(0);
        let nonce =
            NONCE.fetch_add(1, Ordering::Relaxed) ^ (seg.base().as_ptr() as u64).rotate_left(32);
        // SAFETY: FFI; a new socket descriptor or -1.
        let fd = unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(Error::last_os("socket for shared-memory wake-ups"));
        }
        // SAFETY: a fresh descriptor we own.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        let (sa, len) =
            crate::unix_addr::abstract_addr(IfaceAddr::socket_name(pid, nonce).as_bytes());
        // SAFETY: FFI with a valid address of `len` bytes.
        if unsafe { libc::bind(fd, &sa as *const _ as *const libc::sockaddr, len) } != 0 {
            return Err(Error::last_os("binding the shared-memory wake-up socket"));
        }

        let local_dev = DeviceAddr::local()?;
        let mut dev_addr = Vec::with_capacity(DeviceAddr::LEN);
        local_dev.encode(&mut dev_addr);
        let mut iface_addr = Vec::with_capacity(IfaceAddr::LEN);
        let self_addr = IfaceAddr {
            seg: seg.seg_ref(),
            nonce,
        };
        self_addr.encode(&mut iface_addr);
        let sock = Rc::new(sock);
        // SAFETY: `fifo` is the mapping of `seg`, which the table keeps.
        let bufs = unsafe { RxBufs::new(fifo, Some(seg)) };
        Ok(MmIface {
            kind,
            attr: IfaceAttr {
                device_addr_len: dev_addr.len(),
                iface_addr_len: iface_addr.len(),
                ..attr()
            },
            device: device.to_owned(),
            dev_addr,
            local_dev,
            iface_addr,
            fifo,
            bufs,
            read_pos: 0,
            released: 0,
            checks_owed: false,
            stalled_at: None,
            eps: Vec::new(),
            procs: procs.clone(),
            peers: MmPeers::default(),
            common: Rc::new(Common {
                peers: EpollPeers::new(sock.clone()),
                pending_total: Cell::new(0),
                unreported: Cell::new(0),
                exits_unnoted: Cell::new(false),
                tag: RefCell::new(TagState::new()),
                tag_work: Cell::new(false),
                rx_rounds: Cell::new(0),
                sock: sock.clone(),
                self_addr,
                bounce: RefCell::new(vec![0u8; RMA_MAX_BCOPY].into_boxed_slice()),
            }),
            sock,
            next_ep: 0,
            tick: 0,
            last_check: std::time::Instant::now(),
            exit_drain_to: 0,
        })
    }

    fn drain_socket(&self) {
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: FFI into a local buffer of its stated size.
            let n = unsafe {
                libc::recv(
                    self.sock.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                break;
            }
        }
    }

    /// A sender that died between claiming an element and publishing it would stall the FIFO
    /// for everyone. When the next position stays claimed but unpublished across two checks
    /// and the process that stamped it has exited, step over it (a dead process writes no
    /// more). A sender still alive, however slow, is always waited for.
    #[cold]
    #[inline(never)]
    fn check_stall(&mut self) {
        if !self.fifo.claimed_beyond(self.read_pos) {
            self.stalled_at = None;
            return;
        }
        if self.stalled_at != Some(self.read_pos) {
            self.stalled_at = Some(self.read_pos);
            return;
        }
        let buf = self.bufs.slot(self.read_pos);
        // SAFETY: single consumer polling its next position, with its buffer from our table.
        if !matches!(unsafe { self.fifo.poll(self.read_pos, buf) }, Polled::Empty) {
            return;
        }
        let Some(pid) = self.fifo.owner_of(self.read_pos) else {
            return;
        };
        if crate::peer_proc::watch::exited_now(pid) {
            tracing::warn!(
                pid,
                pos = self.read_pos,
                "a shared-memory sender died between claim and publish; skipping its element"
            );
            self.read_pos += 1;
            self.fifo.release(self.read_pos);
            self.released = self.read_pos;
            self.stalled_at = None;
        }
    }

    /// Dispatches pending requests and endpoint errors. Allocates nothing.
    #[inline(never)]
    pub(super) fn progress_eps<S: EventSink>(&mut self, sink: &mut S, check_peers: bool) -> usize {
        let mut count = 0;
        let mut i = 0;
        while i < self.eps.len() {
            let Some(ep) = self.eps[i].upgrade() else {
                self.eps.swap_remove(i);
                continue;
            };
            i += 1;
            if check_peers && !ep.failed.get() && ep.peer.exited() {
                ep.mark_failed(&self.common);
            }
            if ep.failed.get() {
                if self.common.exits_unnoted.replace(false) {
                    self.exit_drain_to = self.fifo.claimed_end();
                }
                // What the exited peer wrote is read first (see `exit_drain_to`); a position
                // it claimed and never published is stepped over by `check_stall`.
                if !ep.reported.get() && self.read_pos >= self.exit_drain_to {
                    ep.reported.set(true);
                    self.common.unreported.set(self.common.unreported.get() - 1);
                    let err = ep.peer_error();
                    // Its outstanding rendezvous operations complete with the error too, and
                    // the segments of it that rendezvous reads mapped are unmapped.
                    self.common.tag.borrow_mut().fail_ops(ep.id, &err);
                    self.common.tag.borrow_mut().forget_peer(ep.peer_pid());
                    self.common
                        .tag_work
                        .set(self.common.tag.borrow().has_work());
                    sink.ep_error(ep.id, err);
                    count += 1;
                }
                continue;
            }
            loop {
                let mut tail = ep.iface_tail.get();
                let space = ep.remote().has_space(&mut tail);
                ep.iface_tail.set(tail);
                if !space {
                    break;
                }
                let Some(req) = ep.pending.pop_front() else {
                    break;
                };
                self.common
                    .pending_total
                    .set(self.common.pending_total.get() - 1);
                count += 1;
                if !sink.pending(ep.id, req) {
                    ep.pending.push_front(req);
                    self.common
                        .pending_total
                        .set(self.common.pending_total.get() + 1);
                    break;
                }
            }
        }
        count
    }
    /// The work of [`Iface::progress`] once its quick look found some: consumes up to
    /// [`POLL_BATCH`] messages (fewer when the sink defers a buffer message after the first:
    /// [`EventSink::defer`]), then does the housekeeping ([`MmIface::housekeeping`]: releases,
    /// periodic checks, pending requests, endpoint errors, tag events). A call whose messages
    /// emptied the FIFO may leave the housekeeping to the next call
    /// ([`MmIface::may_owe_checks`]).
    #[inline(never)]
    fn progress_busy<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let n = match self.take::<S, false>(sink, 0) {
            Ok(n) => n,
            Err(n) => return n,
        };
        self.checks_owed = false;
        if n > 0 {
            self.note_rx_round();
        }
        n + self.housekeeping(n, sink)
    }

    /// The receive loop of [`MmIface::progress_busy`], `n` messages taken so far: gives the
    /// messages taken, or `Err` when the call is to end at once ([`MmIface::may_owe_checks`]).
    /// `HELD`: a message was lent earlier in this call ([`EventSink::am_lend`]), so nothing is
    /// released (the lent elements stay until the next call).
    #[inline(always)]
    fn take<S: EventSink, const HELD: bool>(
        &mut self,
        sink: &mut S,
        mut n: usize,
    ) -> std::result::Result<usize, usize> {
        while n < POLL_BATCH {
            let buf = self.bufs.slot(self.read_pos);
            // SAFETY: this interface is the FIFO's only consumer and read_pos its next position,
            // with its buffer from our table; the data slice is used only inside the sink call,
            // before the release below (a kept one through its HeldBuf).
            match unsafe { self.fifo.poll(self.read_pos, buf) } {
                Polled::Empty if !HELD && self.may_owe_checks(n) => {
                    // The unreleased position sends the next call to the housekeeping.
                    self.checks_owed = true;
                    self.note_rx_round();
                    return Err(n);
                }
                Polled::Empty => break,
                Polled::Buf(id, data) if id < crate::ep::AM_ID_MAX => {
                    if n > 0 && sink.defer(id, data) {
                        prefetch_deferred(data);
                        break;
                    }
                    sink.am_keep(id, data, self.bufs.offer(self.read_pos, data));
                    self.bufs.name_kept(self.read_pos, buf);
                }
                Polled::Msg(id, data) if sink.lends(id) => {
                    if HELD {
                        // Lent too or taken as `am`: nothing is released in this call anyway.
                        sink.am_lend(id, data);
                    } else if sink.am_lend(id, data) {
                        // The message stays in its element, lent to the sink's caller until
                        // the next call: nothing from it on is released in this call.
                        let lent = self.read_pos;
                        self.read_pos += 1;
                        n += 1;
                        if lent - self.released >= fifo::RELEASE_BATCH {
                            self.fifo.release(lent);
                            self.released = lent;
                        }
                        if self.fifo.is_ready(self.read_pos) {
                            n = self.take_behind_lent(sink, n);
                        } else if self.may_owe_checks(n) {
                            // Nothing behind it: as a call that found the FIFO empty, this one
                            // may leave its housekeeping to the next (the lent element is
                            // unreleased, so the next call is not idle).
                            self.checks_owed = true;
                            self.note_rx_round();
                            return Err(n);
                        }
                        break;
                    }
                }
                Polled::Msg(id, data) | Polled::Buf(id, data) => {
                    if id < crate::ep::AM_ID_MAX {
                        sink.am(id, data);
                    } else {
                        self.tag_msg(id, data, sink);
                    }
                }
                Polled::Skip => {}
                Polled::Corrupt(why) => corrupt_dropped(&why),
            }
            self.read_pos += 1;
            n += 1;
            // A receiver taking messages one after another is behind its senders: the
            // elements ahead are likely written, and each is a line to fetch from a sender's
            // core. Asking for one PREFETCH_AHEAD positions on overlaps that fetch with this
            // message's work. (A lone message lent to the sink leaves the loop above and asks
            // nothing; a lone tagged one asks for an element its peer writes two messages
            // later, which this receiver polls, and so fetches, before then anyway.)
            self.fifo.prefetch_elem(self.read_pos + PREFETCH_AHEAD);
            if !HELD && self.read_pos - self.released >= fifo::RELEASE_BATCH {
                self.fifo.release(self.read_pos);
                self.released = self.read_pos;
            }
        }
        Ok(n)
    }

    /// [`MmIface::take`] after a lent message when the next element is written already: the
    /// call goes on (the sink copies what comes behind), so a receiver behind its sender drains
    /// a burst in one call, not one call per message. Out of line: the lone lent message's
    /// path keeps its registers. Gives the messages taken in the call.
    #[inline(never)]
    fn take_behind_lent<S: EventSink>(&mut self, sink: &mut S, n: usize) -> usize {
        match self.take::<S, true>(sink, n) {
            Ok(n) | Err(n) => n,
        }
    }

    /// Tuning: whether a call that consumed `n` messages and then found the FIFO empty returns
    /// to its caller at once, before the release and the periodic checks. What it buys: in a
    /// ping-pong the caller sends its reply one release, one tick test and the pending/tag
    /// tests sooner (d9cf677). Measured on 2026-12-07 (`perftest --local -t tag_lat -n 200000`,
    /// 7 alternating pairs against a build where this gives false, host load 3): typical
    /// latency median 0.195 us with it, 0.197 without, about 1%, near the noise; it stays
    /// because it costs nothing a call that finds no message pays. The next call does what was
    /// left (the unreleased position makes its quick look fail), and does not return early
    /// itself (`checks_owed`), so at most every other call that consumes messages skips the
    /// housekeeping and a stream of single messages still releases and runs pending sends
    /// (`mm::tests::pending_sends_run_while_every_call_consumes_a_message`).
    #[inline(always)]
    fn may_owe_checks(&self, n: usize) -> bool {
        n > 0 && !self.checks_owed && self.released != self.read_pos
    }

    /// After a batch of `n` messages: releases the consumed positions when the batch found
    /// nothing (a batch that consumed some released every [`fifo::RELEASE_BATCH`]), looks for
    /// a FIFO stalled by a dead sender every [`STALL_CHECK_INTERVAL`] empty calls, looks at
    /// the peers and grants every [`PEER_CHECK_INTERVAL`] calls but at most once per
    /// [`PEER_CHECK_PERIOD`], and runs pending requests, endpoint errors and tag events when
    /// any wait. Gives the events it delivered.
    #[inline(always)]
    fn housekeeping<S: EventSink>(&mut self, n: usize, sink: &mut S) -> usize {
        let mut done = 0;
        if n == 0 && self.released != self.read_pos {
            self.fifo.release(self.read_pos);
            self.released = self.read_pos;
        }
        if n == 0 && self.tick.is_multiple_of(STALL_CHECK_INTERVAL) {
            self.check_stall();
        }
        // At most once per PEER_CHECK_PERIOD: a rank spinning on progress makes no system
        // calls between.
        let check_peers = self.tick.is_multiple_of(PEER_CHECK_INTERVAL)
            && !self.eps.is_empty()
            && self.check_due();
        if check_peers {
            crate::grant::maintain();
        }
        if check_peers || self.common.pending_total.get() > 0 || self.common.unreported.get() > 0 {
            done += self.progress_eps(sink, check_peers);
        }
        if self.common.tag_work.get() {
            done += self.tag_progress(sink);
        }
        done
    }
}

impl MmIface {
    /// Counts a progress call that consumed messages ([`Common::rx_rounds`]).
    #[inline(always)]
    fn note_rx_round(&self) {
        self.common
            .rx_rounds
            .set(self.common.rx_rounds.get().wrapping_add(1));
    }

    /// Whether [`PEER_CHECK_PERIOD`] has passed since the last look at the peers (restarting
    /// the period when it has).
    fn check_due(&mut self) -> bool {
        let now = std::time::Instant::now();
        if now.duration_since(self.last_check) < PEER_CHECK_PERIOD {
            return false;
        }
        self.last_check = now;
        true
    }
}

/// Asks the CPU to start reading the first lines of `data` (a message left for the next
/// progress call, which copies it out), so their fetch from the sender's cache overlaps the
/// caller's work until then. Hints only.
#[inline(always)]
fn prefetch_deferred(data: &[u8]) {
    for line in data[..data.len().min(PREFETCH_DEFERRED)].chunks(64) {
        crate::prefetch::prefetch_read(line.as_ptr());
    }
}

/// How many positions past the next one [`MmIface::take`] prefetches.
const PREFETCH_AHEAD: u64 = 2;

/// Bytes of a deferred message [`prefetch_deferred`] asks for.
const PREFETCH_DEFERRED: usize = 512;

#[cold]
fn corrupt_dropped(why: &str) {
    tracing::warn!(why, "corrupt shared-memory FIFO element dropped")
}

impl Iface for MmIface {
    type Ep = MmEp;

    fn attr(&self) -> &IfaceAttr {
        &self.attr
    }
    fn tl_name(&self) -> &'static str {
        self.kind.name()
    }
    fn device_name(&self) -> &str {
        &self.device
    }
    fn device_address(&self) -> &[u8] {
        &self.dev_addr
    }
    fn iface_address(&self) -> &[u8] {
        &self.iface_addr
    }
    fn is_reachable(
        &self,
        dev_addr: &[u8],
        iface_addr: Option<&[u8]>,
    ) -> std::result::Result<(), String> {
        let peer = DeviceAddr::decode(dev_addr).map_err(|e| e.to_string())?;
        if let Some(why) = self.local_dev.unreachable_reason(&peer) {
            return Err(why);
        }
        if let Some(ia) = iface_addr {
            let a = IfaceAddr::decode(ia).map_err(|e| e.to_string())?;
            if a.seg.kind != self.kind {
                return Err(format!(
                    "the peer's address is for {}, this interface is {}",
                    a.seg.kind.name(),
                    self.kind.name()
                ));
            }
            if PeerWatch::Pid(a.seg.pid as libc::pid_t).exited() {
                return Err(format!("peer process {} does not exist", a.seg.pid));
            }
        }
        Ok(())
    }

    fn ep_create_connected(&mut self, dev_addr: &[u8], iface_addr: &[u8]) -> Result<MmEp> {
        let peer_dev = DeviceAddr::decode(dev_addr)?;
        if let Some(why) = self.local_dev.unreachable_reason(&peer_dev) {
            return Err(Error::Unreachable(why));
        }
        let a = IfaceAddr::decode(iface_addr)?;
        if a.seg.kind != self.kind {
            return Err(Error::Unreachable(format!(
                "the peer's address is for {}, this interface is {}",
                a.seg.kind.name(),
                self.kind.name()
            )));
        }
        if a.seg.len != fifo::SEG_LEN as u64 {
            return Err(Error::Wire(format!(
                "FIFO segment of {} bytes, expected {}",
                a.seg.len,
                fifo::SEG_LEN
            )));
        }
        let (proc, seg) = match self.procs.find(a.seg.pid) {
            Some(p) => (p, Segment::attach_fifo(a.seg)?),
            None => {
                // Watch a process new to the worker before mapping, so a pid reused later is
                // not mistaken for it; then let it map our segments and read our registered
                // memory (it checks that we did).
                let watch = PeerWatch::new(a.seg.pid);
                let seg = Segment::attach_fifo(a.seg)?;
                (self.procs.add(a.seg.pid, watch)?, seg)
            }
        };
        // Its pidfd joins our epoll set once, whatever the number of endpoints to it.
        let peer = self.peers.get(proc, &self.common.peers)?;
        // SAFETY: attach mapped SEG_LEN bytes; the Segment lives in EpShared with every copy.
        let remote = unsafe { FifoPtrs::new(seg.base().as_ptr()) };
        remote.validate(a.seg.pid).map_err(Error::Unreachable)?;
        let id = EpId(self.next_ep);
        self.next_ep += 1;
        let shared = Rc::new(EpShared {
            id,
            _seg: seg,
            iface_tail: Cell::new(0),
            peer_nonce: a.nonce,
            pending: PendingQueue::default(),
            failed: Cell::new(false),
            reported: Cell::new(false),
            sent_unchecked: Cell::new(false),
            peer,
            peer_reads_us: Cell::new(false),
        });
        self.eps.push(Rc::downgrade(&shared));
        Ok(MmEp {
            fifo: remote,
            pid: std::process::id(),
            cached_tail: 0,
            rx_seen: 0,
            prefetchw: crate::prefetch::PrefetchW::detect(),
            full_refusals: 0,
            shared,
            common: self.common.clone(),
            maps: Default::default(),
        })
    }

    /// Nothing arrived, nothing waits and no periodic check is due ([`MmIface::idle_poll`]).
    /// Otherwise `MmIface::progress_busy` does the work.
    #[inline(always)]
    fn progress<S: EventSink>(&mut self, sink: &mut S) -> usize {
        if self.idle_poll() {
            return 0;
        }
        self.progress_not_idle(sink)
    }

    #[inline(always)]
    fn progress_not_idle<S: EventSink>(&mut self, sink: &mut S) -> usize {
        self.tick = self.tick.wrapping_add(1);
        self.progress_busy(sink)
    }

    /// A few loads and compares: nothing arrived, nothing waits, no periodic check is due on
    /// this poll. Only a poll that is idle counts itself (one tick); one that is not leaves the
    /// tick to the `progress` call that follows, so a due periodic check is not skipped.
    #[inline(always)]
    fn idle_poll(&mut self) -> bool {
        let tick = self.tick.wrapping_add(1);
        let idle = !self.fifo.is_ready(self.read_pos)
            && self.released == self.read_pos
            && !tick.is_multiple_of(PEER_CHECK_INTERVAL)
            && self.common.pending_total.get() == 0
            && self.common.unreported.get() == 0
            && !self.common.tag_work.get();
        if idle {
            self.tick = tick;
        }
        idle
    }

    fn flush(&mut self, _comp: CompletionId) -> Result<Outcome> {
        // Every operation completes before it returns; queued requests have not started.
        if self.common.pending_total.get() > 0 {
            Ok(Outcome::NoResource)
        } else {
            Ok(Outcome::DONE)
        }
    }

    /// The epoll set of the wake-up socket and the peers' pidfds, made by the first call (an
    /// interface that is only polled holds no epoll descriptor). `None` only when the set
    /// cannot be made (descriptor limit).
    fn event_fd(&self) -> Option<RawFd> {
        match self.common.peers.set() {
            Ok(set) => Some(set.as_raw_fd()),
            Err(e) => {
                tracing::warn!("shared-memory interface: no event set: {e}");
                None
            }
        }
    }

    fn event_arm(&mut self, events: EventFlags) -> Result<()> {
        // SEND_COMP needs nothing: every send completes before it returns, so there is never a
        // send completion to wait for.
        self.drain_socket();
        // About to sleep: look at the peers now (their pidfds also wake the sleeper later).
        for ep in self.eps.iter().filter_map(|w| w.upgrade()) {
            if !ep.failed.get() && ep.peer.exited() {
                ep.mark_failed(&self.common);
            }
        }
        if self.common.unreported.get() > 0 {
            return Err(Error::Busy("endpoint errors wait for progress".into()));
        }
        if self.common.tag_work.get() {
            return Err(Error::Busy("tag events wait for progress".into()));
        }
        if events.contains(EventFlags::RECV) && !self.fifo.arm(self.read_pos) {
            return Err(Error::Busy("messages are arriving".into()));
        }
        Ok(())
    }

    fn tag_recv_zcopy(
        &mut self,
        tag: u64,
        mask: u64,
        iov: &[Iov<'_>],
        ctx: TagRecvId,
    ) -> Result<Outcome> {
        self.tag_post(tag, mask, iov, ctx)
    }
    fn tag_recv_cancel(&mut self, ctx: TagRecvId, force: bool) -> Result<()> {
        self.tag_cancel(ctx, force)
    }
    fn tag_recv_canceler(&self) -> Option<crate::iface::TagRecvCanceler> {
        Some(Rc::new(self.tag_canceler()))
    }
}

/// Checks a zero-copy iov: at most [`MAX_IOV`] entries of at most `max_len` bytes in all.
#[inline]
pub(super) fn check_iov(iov: &[Iov<'_>], max_len: usize) -> Result<usize> {
    if iov.len() > MAX_IOV {
        return Err(Error::InvalidParam(format!(
            "{} iov entries, at most {MAX_IOV}",
            iov.len()
        )));
    }
    let total = Iov::total_len(iov);
    check_len(total, max_len)?;
    Ok(total)
}
