//! The `cma` transport (device `memory`, memory domain `cma`): put/get zcopy between processes of
//! one host with `process_vm_writev` / `process_vm_readv` on registered memory.
//!
//! Registration records the range; the packed rkey is the owner's pid plus the range. The pid
//! in a peer's address or key is only a claim: an endpoint reads or writes another process
//! only once that process has granted this one access through the kernel-verified grant
//! socket ([`crate::grant`]), which every rucx process does for the peers it creates
//! endpoints to. A claimed pid that never granted fails the endpoint with
//! [`Error::RemoteAccess`] and a log line, and nothing of that process is touched. Every
//! access is checked against the remote key (same pid, range inside the key's region).
//!
//! The kernel checks the ptrace permission on every call. `is_reachable` asks it up front (by
//! opening `/proc/<pid>/mem`, which reads nothing), so a peer the kernel forbids (Yama
//! `ptrace_scope` 1, another user, no `CAP_SYS_PTRACE`) is reported unreachable with the reason
//! and ucp uses another path for it; Yama `ptrace_scope` 2 or 3 makes the transport unavailable.

use crate::caps::{
    DeviceType, EventFlags, IfaceAttr, IfaceFlags, MdAttr, MdFlags, OpLimits, PerfModel, TlRoles,
};
use crate::ep::{check_len, CompletionId, Endpoint, EpId, PendingId};
use crate::iface::{EventSink, Iface, IfaceParams};
use crate::md::{Iov, MemHandle, MemoryDomain, RemoteKey};
use crate::mm::wire::DeviceAddr;
use crate::peer_proc::{PeerProc, PeerProcs};
use crate::transport::{DeviceInfo, Transport};
use std::cell::{Cell, RefCell};
use std::ptr::NonNull;
use std::rc::{Rc, Weak};
use ucs::{Error, Outcome, Result};

/// The device name.
pub const DEVICE: &str = "memory";
/// Largest iov count of put/get zcopy.
pub const MAX_IOV: usize = 16;
/// Largest put/get zcopy.
pub const MAX_ZCOPY: usize = 1 << 30;
/// Progress calls between two checks of the peers' liveness.
const PEER_CHECK_INTERVAL: u32 = 256;
/// The shortest time between two looks at the peers and the grant listener.
const PEER_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_millis(1);

/// A packed cma remote key.
///
/// ```text
/// 0         1        4           8             16            24
/// +---------+--------+-----------+-------------+-------------+
/// | version | 0 0 0  | pid (u32) | base (u64)  | len (u64)   |
/// +---------+--------+-----------+-------------+-------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaRkey {
    /// Owner process.
    pub pid: u32,
    /// Start of the region in the owner.
    pub base: u64,
    /// Length of the region.
    pub len: u64,
}

impl CmaRkey {
    /// Encoded length.
    pub const LEN: usize = 24;
    /// Appends the encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        ucs::codec::Writer::new(out)
            .bytes(&[1, 0, 0, 0])
            .u32(self.pid)
            .u64(self.base)
            .u64(self.len);
    }
    /// Decodes exactly [`Self::LEN`] bytes.
    pub fn decode(b: &[u8]) -> Result<Self> {
        use ucs::codec::{exact, u32_at, u64_at};
        let b = exact::<{ Self::LEN }>(b, "cma remote key")?;
        if b[..4] != [1, 0, 0, 0] {
            return Err(Error::Wire("cma remote key version/reserved bytes".into()));
        }
        let k = CmaRkey {
            pid: u32_at(b, 4),
            base: u64_at(b, 8),
            len: u64_at(b, 16),
        };
        if k.pid == 0 || k.base.checked_add(k.len).is_none() {
            return Err(Error::Wire(format!("cma remote key {k:?} is invalid")));
        }
        Ok(k)
    }
}

/// A cma interface address: the process id, as a varint ([`ucs::varint`]). The format is
/// versioned by the worker address that carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaIfaceAddr {
    /// The process.
    pub pid: u32,
}

impl CmaIfaceAddr {
    /// Largest encoded length.
    pub const LEN: usize = 5;
    /// Appends the encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        ucs::codec::Writer::new(out).var(self.pid as u64);
    }
    /// Decodes exactly one encoding (no trailing bytes); pid 0 is an error.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let mut r = ucs::codec::Reader::new(b, "cma interface address");
        let pid = r.var_u32("pid")?;
        r.finish()?;
        if pid == 0 {
            return Err(Error::Wire("cma interface address has pid 0".into()));
        }
        Ok(CmaIfaceAddr { pid })
    }
}

/// This process's id as [`own_pid`] last read it (0: not read since start or the last fork).
static OWN_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn forget_own_pid() {
    OWN_PID.store(0, std::sync::atomic::Ordering::Relaxed);
}

/// This process's id, read once and again in a forked child: `getpid` is a system call, and
/// every rendezvous send packs the id into its remote key (~1.5% of a core at 16 KiB with
/// traffic both ways).
fn own_pid() -> u32 {
    use std::sync::atomic::Ordering::Relaxed;
    let p = OWN_PID.load(Relaxed);
    if p != 0 {
        return p;
    }
    static AT_FORK: std::sync::Once = std::sync::Once::new();
    AT_FORK.call_once(|| {
        // SAFETY: registers a handler that only stores into an atomic, which is
        // async-signal-safe, as a handler run in a forked child must be.
        unsafe { libc::pthread_atfork(None, None, Some(forget_own_pid)) };
    });
    let p = std::process::id();
    OWN_PID.store(p, Relaxed);
    p
}

/// Checks that this process may use process_vm_readv/writev at all.
fn self_test() -> std::result::Result<(), String> {
    match crate::grant::ptrace_scope() {
        None | Some(0) | Some(1) => {}
        Some(v) => {
            return Err(format!(
                "kernel.yama.ptrace_scope is {v}: cross-process memory access is forbidden"
            ))
        }
    }
    let src = [0x5au8; 8];
    let mut dst = [0u8; 8];
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr() as *mut libc::c_void,
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: src.as_ptr() as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: FFI reading 8 bytes of our own memory into an 8-byte local buffer.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n != 8 || dst != src {
        return Err(format!(
            "process_vm_readv self-test failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The `cma` transport.
pub struct CmaTransport;

impl Transport for CmaTransport {
    const NAME: &'static str = "cma";
    const ROLES: TlRoles = TlRoles::empty();
    type Md = CmaMd;
    type Iface = CmaIface;
    type Ep = CmaEp;

    fn devices() -> std::result::Result<Vec<DeviceInfo>, String> {
        self_test().inspect_err(|why| {
            // Once per process: the layers above then use another path for every peer.
            static LOGGED: std::sync::Once = std::sync::Once::new();
            LOGGED.call_once(|| tracing::info!("cma is not used for any process: {why}"));
        })?;
        Ok(vec![DeviceInfo {
            name: DEVICE.into(),
            dev_type: DeviceType::Shm,
            details: "cross-memory attach (process_vm_readv/writev)".into(),
        }])
    }
    fn open_md(device: &str) -> Result<CmaMd> {
        check_device(device)?;
        self_test().map_err(Error::NoDevice)?;
        Ok(CmaMd {
            attr: MdAttr {
                flags: MdFlags::REG | MdFlags::NEED_RKEY,
                max_alloc: 0,
                max_reg: usize::MAX,
                rkey_packed_size: CmaRkey::LEN,
                reg_cost: (0.0, 0.0),
            },
        })
    }
    fn open_iface(md: &CmaMd, params: &IfaceParams) -> Result<CmaIface> {
        Self::open_iface_shared(md, params, &PeerProcs::new())
    }
    fn open_iface_shared(_md: &CmaMd, params: &IfaceParams, procs: &PeerProcs) -> Result<CmaIface> {
        check_device(&params.device)?;
        // Peers grant us access through our grant socket; without it no peer can be verified.
        crate::grant::listen()?;
        CmaIface::open(&params.device, procs)
    }
}

fn check_device(device: &str) -> Result<()> {
    if device == DEVICE {
        Ok(())
    } else {
        Err(Error::NoDevice(format!(
            "transport 'cma' has no device '{device}'; its only device is '{DEVICE}'"
        )))
    }
}

/// The `cma` memory domain: registration records a range of this process.
pub struct CmaMd {
    attr: MdAttr,
}

/// Marks a handle registered by the cma domain.
struct CmaReg;

impl MemoryDomain for CmaMd {
    fn name(&self) -> &'static str {
        "cma"
    }
    fn attr(&self) -> &MdAttr {
        &self.attr
    }
    unsafe fn mem_reg(&self, addr: NonNull<u8>, len: usize) -> Result<MemHandle> {
        // SAFETY: the caller guarantees the range stays valid while the handle lives.
        Ok(unsafe { MemHandle::new(addr, len, "cma", Some(Box::new(CmaReg))) })
    }
    fn rkey_pack(&self, memh: &MemHandle, out: &mut Vec<u8>) -> Result<()> {
        if memh.tl_data::<CmaReg>().is_none() {
            return Err(Error::InvalidParam(format!(
                "{memh:?} was not registered with memory domain cma"
            )));
        }
        CmaRkey {
            pid: own_pid(),
            base: memh.addr() as u64,
            len: memh.len() as u64,
        }
        .encode(out);
        Ok(())
    }
    fn rkey_unpack(&self, packed: &[u8]) -> Result<RemoteKey> {
        let k = CmaRkey::decode(packed)?;
        Ok(RemoteKey::unmapped(k.base, k.len, k.pid as u64))
    }
}

/// What every endpoint of the interface to one peer process shares: the worker's entry for the
/// process (the watch on it, our grant to it), whether it granted us access, and whether it
/// failed. One per process, however many endpoints reach it (a worker with 1,000 endpoints to
/// four processes holds four).
struct CmaPeer {
    /// The worker's entry for the process.
    proc: Rc<PeerProc>,
    /// The peer process has granted us access (checked until it has).
    verified: Cell<bool>,
    /// The peer never granted access when we needed it: the endpoint failed with this (boxed:
    /// every endpoint has the field, few the error).
    refused: RefCell<Option<Box<Error>>>,
    failed: Cell<bool>,
    /// The live endpoints to this process whose failure is not reported yet.
    eps: RefCell<Vec<EpId>>,
    /// The interface's [`CmaIface::unreported`], set with `failed`.
    iface_unreported: Rc<Cell<bool>>,
}

impl CmaPeer {
    fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Marks the endpoint failed, for the interface's next progress to report.
    fn fail(&self) {
        self.failed.set(true);
        self.iface_unreported.set(true);
    }

    /// The error a failed endpoint gives.
    fn failure(&self) -> Error {
        match self.refused.borrow().as_deref() {
            Some(e) => e.clone(),
            None => peer_gone(self.pid()),
        }
    }

    /// Checks that the peer process granted us access; on the first refusal fails the
    /// endpoint (reported once by progress) and logs it.
    fn verify(&self) -> Result<()> {
        if self.verified.get() {
            return Ok(());
        }
        match crate::grant::check(self.pid(), "cma access") {
            Ok(()) => {
                self.verified.set(true);
                Ok(())
            }
            Err(e) => {
                *self.refused.borrow_mut() = Some(Box::new(e.clone()));
                self.fail();
                Err(e)
            }
        }
    }
}

/// A cma interface: its address is the process id; there is nothing to receive.
pub struct CmaIface {
    attr: IfaceAttr,
    device: String,
    dev_addr: Vec<u8>,
    local_dev: DeviceAddr,
    iface_addr: Vec<u8>,
    /// The worker's peer processes (shared with its other interfaces).
    procs: PeerProcs,
    /// The peer processes of our endpoints (a failed one until its endpoints are reported).
    peers: Vec<Weak<CmaPeer>>,
    next_ep: u32,
    tick: u32,
    /// When the peers and grants were last looked at (see [`PEER_CHECK_PERIOD`]).
    last_check: std::time::Instant,
    /// An endpoint failed since progress last looked: progress walks the endpoints only then
    /// and on its periodic peer check.
    unreported: Rc<Cell<bool>>,
}

impl CmaIface {
    fn open(device: &str, procs: &PeerProcs) -> Result<Self> {
        let local_dev = DeviceAddr::local()?;
        let mut dev_addr = Vec::new();
        local_dev.encode(&mut dev_addr);
        let mut iface_addr = Vec::new();
        CmaIfaceAddr {
            pid: std::process::id(),
        }
        .encode(&mut iface_addr);
        let zcopy = OpLimits {
            max_short: 0,
            max_bcopy: 0,
            min_zcopy: 0,
            max_zcopy: MAX_ZCOPY,
            max_iov: MAX_IOV,
            max_hdr: 0,
        };
        Ok(CmaIface {
            attr: IfaceAttr {
                flags: IfaceFlags::PUT_ZCOPY
                    | IfaceFlags::GET_ZCOPY
                    | IfaceFlags::CONNECT_TO_IFACE
                    | IfaceFlags::ERRHANDLE_PEER_FAILURE
                    | IfaceFlags::SYNC_ONLY,
                event_flags: EventFlags::empty(),
                atomics: Default::default(),
                am: OpLimits::default(),
                put: zcopy,
                get: zcopy,
                tag: Default::default(),
                device_addr_len: dev_addr.len(),
                iface_addr_len: iface_addr.len(),
                ep_addr_len: 0,
                // One process_vm_readv of 1 MiB between two processes moved 11.4 GB/s (4 KiB
                // pages; 23 with transparent huge pages; up to ~30 while the data stays in
                // cache), with ~0.4-0.5 µs per call (8 KiB in 0.5-0.55 µs): UCX's cma default
                // (SM_BW) is 11.1 GB/s.
                perf: PerfModel {
                    send_overhead: 400e-9,
                    recv_overhead: 0.0,
                    bandwidth: 12e9,
                    latency: 80e-9,
                },
                priority: 0,
            },
            device: device.to_owned(),
            dev_addr,
            local_dev,
            iface_addr,
            procs: procs.clone(),
            peers: Vec::new(),
            next_ep: 0,
            tick: 0,
            last_check: std::time::Instant::now(),
            unreported: Rc::new(Cell::new(false)),
        })
    }
}

impl Iface for CmaIface {
    type Ep = CmaEp;
    fn attr(&self) -> &IfaceAttr {
        &self.attr
    }
    fn tl_name(&self) -> &'static str {
        "cma"
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
            return Err(why.replace("shared memory", "cma"));
        }
        if let Some(ia) = iface_addr {
            let a = CmaIfaceAddr::decode(ia).map_err(|e| e.to_string())?;
            if a.pid != std::process::id() {
                crate::grant::may_trace(a.pid).inspect_err(|why| {
                    tracing::info!("cma is not used for process {}: {why}", a.pid)
                })?;
            }
        }
        Ok(())
    }
    fn ep_create_connected(&mut self, dev_addr: &[u8], iface_addr: &[u8]) -> Result<CmaEp> {
        let peer = DeviceAddr::decode(dev_addr)?;
        if let Some(why) = self.local_dev.unreachable_reason(&peer) {
            return Err(Error::Unreachable(why.replace("shared memory", "cma")));
        }
        let a = CmaIfaceAddr::decode(iface_addr)?;
        let id = EpId(self.next_ep);
        let peer = self.peer(a.pid)?;
        self.next_ep += 1;
        peer.eps.borrow_mut().push(id);
        Ok(CmaEp { id, process: peer })
    }
    /// Nothing failed and no peer check is due: a counter and two tests, inlined into the
    /// caller. Otherwise `CmaIface::progress_eps` does the work.
    #[inline(always)]
    fn progress<S: EventSink>(&mut self, sink: &mut S) -> usize {
        // Look at the peers (a poll on each pidfd) and serve grant requests on one call in
        // PEER_CHECK_INTERVAL, at most once per PEER_CHECK_PERIOD: a rank spinning on progress
        // makes no system calls between.
        self.tick = self.tick.wrapping_add(1);
        if !self.tick.is_multiple_of(PEER_CHECK_INTERVAL) && !self.unreported.get() {
            return 0;
        }
        self.progress_eps(sink)
    }
    fn flush(&mut self, _comp: CompletionId) -> Result<Outcome> {
        Ok(Outcome::DONE)
    }
}

impl CmaIface {
    /// The work of [`Iface::progress`] when its quick look found some: the periodic peer check
    /// (when its period has passed) and the report of failed endpoints.
    #[inline(never)]
    fn progress_eps<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let check = self.tick.is_multiple_of(PEER_CHECK_INTERVAL) && self.check_due();
        if check {
            crate::grant::maintain();
        } else if !self.unreported.get() {
            return 0;
        }
        self.unreported.set(false);
        let mut n = 0;
        let mut i = 0;
        while i < self.peers.len() {
            let Some(peer) = self.peers[i].upgrade() else {
                self.peers.swap_remove(i);
                continue;
            };
            if check && !peer.failed.get() && peer.proc.exited() {
                peer.failed.set(true);
            }
            if !peer.failed.get() {
                i += 1;
                continue;
            }
            // Reported once: new endpoints to the process get a new peer.
            self.peers.swap_remove(i);
            let eps = std::mem::take(&mut *peer.eps.borrow_mut());
            for id in eps {
                sink.ep_error(id, peer.failure());
                n += 1;
            }
        }
        n
    }

    /// The peer process `pid` of a live endpoint unless it failed, else a new one: the
    /// worker's entry for the process (watched and granted access to us, unless it is
    /// ourselves), checked until it has granted us access.
    fn peer(&mut self, pid: u32) -> Result<Rc<CmaPeer>> {
        let proc = self.procs.get(pid)?;
        if let Some(p) = self
            .peers
            .iter()
            .filter_map(Weak::upgrade)
            .find(|p| Rc::ptr_eq(&p.proc, &proc) && !p.failed.get())
        {
            return Ok(p);
        }
        let own = pid == std::process::id();
        let peer = Rc::new(CmaPeer {
            proc,
            verified: Cell::new(own || crate::grant::granted(pid)),
            refused: RefCell::new(None),
            failed: Cell::new(false),
            eps: RefCell::new(Vec::new()),
            iface_unreported: self.unreported.clone(),
        });
        self.peers.push(Rc::downgrade(&peer));
        Ok(peer)
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

fn peer_gone(pid: u32) -> Error {
    Error::PeerFailure(format!("cma peer process {pid} has exited"))
}

/// A cma endpoint: reads and writes the peer's registered memory.
pub struct CmaEp {
    id: EpId,
    /// The peer process (shared with every other endpoint to it).
    process: Rc<CmaPeer>,
}

impl Drop for CmaEp {
    fn drop(&mut self) {
        let mut eps = self.process.eps.borrow_mut();
        if let Some(i) = eps.iter().position(|&e| e == self.id) {
            eps.swap_remove(i);
        }
    }
}

impl CmaEp {
    /// The worker's entry for the endpoint's peer process.
    #[cfg(test)]
    pub(crate) fn peer_proc(&self) -> &Rc<PeerProc> {
        &self.process.proc
    }

    fn rw(
        &mut self,
        write: bool,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome> {
        if self.process.failed.get() {
            return Err(self.process.failure());
        }
        if iov.len() > MAX_IOV {
            return Err(Error::InvalidParam(format!(
                "{} iov entries, at most {MAX_IOV}",
                iov.len()
            )));
        }
        // The endpoint's process first: an unverified pid fails the endpoint whatever the key.
        self.process.verify()?;
        if rkey.tl_value != self.process.pid() as u64 {
            return Err(Error::RemoteAccess(format!(
                "the remote key belongs to process {}, this endpoint reaches {}",
                rkey.tl_value,
                self.process.pid()
            )));
        }
        let total = Iov::total_len(iov);
        check_len(total, MAX_ZCOPY)?;
        rkey.check(remote_addr, total)?;
        if total == 0 {
            return Ok(Outcome::DONE);
        }
        let mut local = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_IOV];
        for (l, v) in local.iter_mut().zip(iov) {
            l.iov_base = v.ptr() as *mut libc::c_void;
            l.iov_len = v.len();
        }
        let mut done = 0usize;
        while done < total {
            // Skip local pieces already moved (short transfers are resumed).
            let mut skip = done;
            let mut k = 0;
            let mut lv = local;
            while k < iov.len() && skip >= local[k].iov_len {
                skip -= local[k].iov_len;
                k += 1;
            }
            lv[k].iov_base = (local[k].iov_base as *mut u8).wrapping_add(skip) as *mut libc::c_void;
            lv[k].iov_len -= skip;
            let remote = libc::iovec {
                iov_base: (remote_addr as usize + done) as *mut libc::c_void,
                iov_len: total - done,
            };
            let pid = self.process.pid() as libc::pid_t;
            let cnt = (iov.len() - k) as libc::c_ulong;
            // SAFETY: local pieces are registered ranges of this process (checked when each Iov
            // was made); the remote range was bounds-checked against the rkey, and the kernel
            // validates it in the peer.
            let n = unsafe {
                if write {
                    libc::process_vm_writev(pid, lv[k..].as_ptr(), cnt, &remote, 1, 0)
                } else {
                    libc::process_vm_readv(pid, lv[k..].as_ptr(), cnt, &remote, 1, 0)
                }
            };
            if n <= 0 {
                let err = std::io::Error::last_os_error();
                return Err(match err.raw_os_error() {
                    Some(libc::ESRCH) => {
                        self.process.proc.set_exited();
                        self.process.fail();
                        peer_gone(self.process.pid())
                    }
                    Some(libc::EFAULT) => Error::RemoteAccess(format!(
                        "{total} bytes at {remote_addr:#x} are not mapped in process {}",
                        self.process.pid()
                    )),
                    Some(libc::EPERM) => Error::RemoteAccess(format!(
                        "the kernel forbids access to process {} (ptrace permission)",
                        self.process.pid()
                    )),
                    _ => Error::io("process_vm_readv/writev", err),
                });
            }
            done += n as usize;
        }
        Ok(Outcome::DONE)
    }
}

impl Endpoint for CmaEp {
    fn id(&self) -> EpId {
        self.id
    }
    fn put_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: CompletionId,
    ) -> Result<Outcome> {
        self.rw(true, iov, remote_addr, rkey)
    }
    fn get_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: CompletionId,
    ) -> Result<Outcome> {
        self.rw(false, iov, remote_addr, rkey)
    }
    fn flush(&mut self, _comp: CompletionId) -> Result<Outcome> {
        if self.process.failed.get() {
            return Err(self.process.failure());
        }
        Ok(Outcome::DONE)
    }
    fn fence(&mut self) -> Result<()> {
        Ok(())
    }
    fn pending_add(&mut self, _req: PendingId) -> Result<()> {
        Err(Error::Busy(
            "cma operations never lack resources: retry now".into(),
        ))
    }
    fn pending_purge(&mut self, _f: &mut dyn FnMut(PendingId)) {}
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn cma_rkey_and_address_codecs() {
        let k = CmaRkey {
            pid: 77,
            base: 0x1000,
            len: 64,
        };
        let mut v = Vec::new();
        k.encode(&mut v);
        assert_eq!(v.len(), CmaRkey::LEN);
        assert_eq!(CmaRkey::decode(&v).unwrap(), k);
        for n in 0..v.len() {
            assert!(matches!(CmaRkey::decode(&v[..n]), Err(Error::Wire(_))));
        }
        let mut bad = v.clone();
        bad[0] = 2;
        assert!(matches!(CmaRkey::decode(&bad), Err(Error::Wire(_))));
        let a = CmaIfaceAddr { pid: 99 };
        let mut v = Vec::new();
        a.encode(&mut v);
        assert_eq!(v, [99]);
        assert_eq!(CmaIfaceAddr::decode(&v).unwrap(), a);
        for n in 0..v.len() {
            assert!(matches!(CmaIfaceAddr::decode(&v[..n]), Err(Error::Wire(_))));
        }
        let big = CmaIfaceAddr { pid: u32::MAX };
        let mut v = Vec::new();
        big.encode(&mut v);
        assert_eq!(v.len(), CmaIfaceAddr::LEN);
        assert_eq!(CmaIfaceAddr::decode(&v).unwrap(), big);
        for (bad, why) in [
            (&[0u8][..], "pid 0"),
            (&[0x80, 0x80, 0x80, 0x80, 0x10], "exceeds"),
            (&[99, 0], "trailing"),
            (&[0x80, 0x00], "shortest"),
        ] {
            let e = CmaIfaceAddr::decode(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }
}

#[cfg(all(test, not(loom)))]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = CmaRkey::decode(&bytes);
            let _ = CmaIfaceAddr::decode(&bytes);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod pid_tests {
    use super::*;

    /// The cached id is this process's, and a forked child reads its own (its keys must not
    /// name the parent).
    #[test]
    fn own_pid_follows_fork() {
        assert_eq!(own_pid(), std::process::id());
        assert_eq!(own_pid(), std::process::id());
        // SAFETY: the child only calls own_pid (an atomic load, getpid, an atomic store) and
        // _exit, nothing that could wait on a lock another thread held at the fork.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            // SAFETY: getpid is async-signal-safe.
            let ok = own_pid() == unsafe { libc::getpid() } as u32;
            // SAFETY: _exit is async-signal-safe and ends the child without unwinding.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status:#x}"
        );
        assert_eq!(own_pid(), std::process::id());
    }
}

#[cfg(all(test, not(loom)))]
mod access_tests {
    use super::*;

    fn open() -> (CmaMd, CmaIface) {
        let md = CmaTransport::open_md(DEVICE).unwrap();
        let iface = CmaTransport::open_iface(
            &md,
            &IfaceParams {
                device: DEVICE.into(),
                ..Default::default()
            },
        )
        .unwrap();
        (md, iface)
    }

    #[test]
    fn every_access_is_checked_against_the_remote_key() {
        let (md, mut iface) = open();
        let mut remote = vec![7u8; 64];
        // SAFETY: `remote` outlives the handle.
        let rh = unsafe { md.mem_reg(NonNull::new(remote.as_mut_ptr()).unwrap(), 64) }.unwrap();
        let mut packed = Vec::new();
        md.rkey_pack(&rh, &mut packed).unwrap();
        let rkey = md.rkey_unpack(&packed).unwrap();
        let mut local = vec![0u8; 16];
        // SAFETY: `local` outlives the handle.
        let lh = unsafe { md.mem_reg(NonNull::new(local.as_mut_ptr()).unwrap(), 16) }.unwrap();
        let dev = iface.device_address().to_vec();
        let addr = iface.iface_address().to_vec();
        let mut ep = iface.ep_create_connected(&dev, &addr).unwrap();
        let base = rh.addr() as u64;
        let two = [Iov::new(&lh, 0, 2).unwrap()];
        let eight = [Iov::new(&lh, 0, 8).unwrap()];
        // Inside the region: works.
        assert_eq!(
            ep.get_zcopy(&two, base + 62, &rkey, CompletionId(0))
                .unwrap(),
            Outcome::DONE
        );
        // Past its end, before its start, and with an offset + length that overflows.
        for (iov, at) in [
            (&two, base + 63),
            (&two, base + 64),
            (&two, base - 1),
            (&eight, u64::MAX - 3),
            (&eight, u64::MAX),
        ] {
            let r = ep.get_zcopy(iov, at, &rkey, CompletionId(0));
            assert!(matches!(r, Err(Error::RemoteAccess(_))), "{at:#x}: {r:?}");
            let r = ep.put_zcopy(iov, at, &rkey, CompletionId(0));
            assert!(matches!(r, Err(Error::RemoteAccess(_))), "{at:#x}: {r:?}");
        }
        // A key naming another process is refused by this endpoint.
        let other = RemoteKey::unmapped(base, 64, 1);
        let r = ep.get_zcopy(&two, base, &other, CompletionId(0));
        assert!(matches!(r, Err(Error::RemoteAccess(_))), "{r:?}");
        // A packed key whose range overflows does not even decode.
        let mut bad = Vec::new();
        CmaRkey {
            pid: 77,
            base: u64::MAX - 10,
            len: 64,
        }
        .encode(&mut bad);
        assert!(matches!(md.rkey_unpack(&bad), Err(Error::Wire(_))));
        // Nothing above wrote outside the one good read.
        assert_eq!(remote, vec![7u8; 64]);
        drop(lh);
        assert_eq!(&local[..2], &[7, 7]);
        assert!(local[2..].iter().all(|&b| b == 0));
    }

    #[derive(Default)]
    struct Errors(Vec<EpId>);

    impl EventSink for Errors {
        fn am(&mut self, _id: u8, _data: &[u8]) {}
        fn completion(&mut self, _comp: CompletionId, _result: Result<u64>) {}
        fn pending(&mut self, _ep: EpId, _req: PendingId) -> bool {
            true
        }
        fn ep_error(&mut self, ep: EpId, _err: Error) {
            self.0.push(ep);
        }
    }

    #[test]
    fn endpoints_to_one_process_share_it_and_each_fails_once() {
        let (_md, mut iface) = open();
        let dev = iface.device_address().to_vec();
        let addr = iface.iface_address().to_vec();
        let eps: Vec<CmaEp> = (0..3)
            .map(|_| iface.ep_create_connected(&dev, &addr).unwrap())
            .collect();
        assert_eq!(iface.peers.len(), 1, "one peer process, one entry");
        assert!(eps.iter().all(|e| Rc::ptr_eq(&e.process, &eps[0].process)));
        let ids: Vec<EpId> = eps.iter().map(|e| e.id()).collect();
        let mut eps = eps;
        drop(eps.remove(1));
        // The process fails: each live endpoint is reported once, the dropped one never.
        eps[0].process.fail();
        let mut sink = Errors::default();
        assert_eq!(iface.progress(&mut sink), 2);
        assert_eq!(sink.0, vec![ids[0], ids[2]]);
        assert_eq!(iface.progress(&mut sink), 0);
        assert!(eps[1].flush(CompletionId(0)).is_err(), "still failed");
        // A new endpoint to the process starts afresh.
        let mut again = iface.ep_create_connected(&dev, &addr).unwrap();
        assert!(!Rc::ptr_eq(&again.process, &eps[0].process));
        assert!(again.flush(CompletionId(0)).is_ok());
        assert_eq!(iface.peers.len(), 1);
    }

    #[test]
    fn an_address_naming_a_process_that_is_not_a_rucx_peer_is_refused() {
        let (_md, mut iface) = open();
        let mut victim = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let dev = iface.device_address().to_vec();
        let mut forged = Vec::new();
        CmaIfaceAddr { pid: victim.id() }.encode(&mut forged);
        let r = iface.ep_create_connected(&dev, &forged).map(|_| ());
        victim.kill().unwrap();
        victim.wait().unwrap();
        let e = r.unwrap_err();
        assert!(matches!(e, Error::Unreachable(_)), "{e}");
        assert!(e.to_string().contains("not a rucx process"), "{e}");
    }
}

#[cfg(all(test, not(loom)))]
mod conformance {
    crate::uct_conformance_tests!(cma, crate::testing::TlPair<crate::cma::CmaTransport>);
}
