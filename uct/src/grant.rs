//! Consent between processes of one host: which peer processes may this process's transports
//! reach into (cma `process_vm_readv`/`writev`, mapping a peer's shared-memory segment).
//!
//! A pid written in an address, a remote key or a rendezvous header is only a claim. The
//! kernel vouches for pids here instead: every process that opens a cma or shared-memory
//! interface listens on the abstract unix stream socket `\0rucx-grant-<pid>`. A process that
//! creates an endpoint to a peer connects to the peer's socket ([`grant_to`]); the peer accepts
//! and reads the connecting process's pid with `SO_PEERCRED` (set by the kernel at `connect`,
//! not by the process). That connection is the consent: "the peer may touch my memory", and
//! it lasts until the granting process drops its last endpoint to the peer or exits.
//! [`check`] gives whether a process holds such a connection to us (waiting up to
//! [`GRANT_WAIT`] for one that has not arrived, as when keys were exchanged out of band;
//! [`check_now`] never waits, for paths inside `progress`); transports call it before they
//! touch another process's memory, so a peer that names a third process's pid makes them fail
//! with an error instead of touching that process. The granting process also writes one byte:
//! whether the kernel lets it trace us ([`peer_may_trace_us`]).
//!
//! The connecting side checks with `SO_PEERCRED` too that the socket it reached belongs to the
//! pid it meant. A process that squats another's socket name is refused; the squatted process
//! then cannot be granted anything (shared memory and cma to it fail with the reason).
//!
//! Under Yama `ptrace_scope` 1 the first peer this process grants is also made its ptracer
//! (`PR_SET_PTRACER`), so that peer's cma works; others fall back to another path (the cma
//! interface reports them unreachable).
//!
//! Limitation: the consent is per process pair, not per connection. When X has granted S (X
//! has an endpoint to S, or was led to create one towards S's address by a peer that
//! advertised it), another peer of S can name X's pid to S and make S touch X's memory at
//! addresses it chooses. Closing that needs the control messages themselves to be bound to
//! the process that sent them.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};
use ucs::async_ctx::{ready_now, EventSet, Interest, Ready};
use ucs::{Error, Result};

/// Backlog of the grant socket (the kernel caps it at `net.core.somaxconn`).
const BACKLOG: i32 = 4096;

/// A connection from this process to a peer's grant socket: while it lives, the peer may reach
/// this process's memory. Shared by every endpoint of this process to that peer.
#[derive(Debug)]
pub struct Grant {
    pid: u32,
    _conn: OwnedFd,
}

impl Grant {
    /// The process granted.
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

/// The process-wide grant state.
struct Registry {
    /// The process that made this state (a forked child starts over).
    owner: u32,
    listener: Option<OwnedFd>,
    /// Why the listener could not be made, once it failed.
    listen_error: Option<String>,
    /// Connections accepted on our socket.
    incoming: Vec<Incoming>,
    /// Our connections to peers' sockets, by peer pid.
    outgoing: HashMap<u32, Weak<Grant>>,
    /// The pid made our ptracer under Yama `ptrace_scope` 1, if any.
    ptracer: Option<u32>,
}

/// A grant made to us: the granting process, its connection, and what it said about reaching
/// us (the one byte it writes after connecting; `None` until it is read).
struct Incoming {
    pid: u32,
    conn: OwnedFd,
    it_may_trace_us: Option<bool>,
}

/// The byte a granting process writes: whether the kernel lets it trace the granted one.
const MAY_TRACE: u8 = 1;
const MAY_NOT_TRACE: u8 = 2;

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut g = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    let me = std::process::id();
    if g.as_ref().is_none_or(|r| r.owner != me) {
        *g = Some(Registry {
            owner: me,
            listener: None,
            listen_error: None,
            incoming: Vec::new(),
            outgoing: HashMap::new(),
            ptracer: None,
        });
    }
    f(g.as_mut().expect("registry just made"))
}

/// The abstract socket name of process `pid`'s grant socket (without the leading NUL).
pub fn socket_name(pid: u32) -> String {
    format!("rucx-grant-{pid}")
}

fn sockaddr(pid: u32) -> (libc::sockaddr_un, libc::socklen_t) {
    crate::unix_addr::abstract_addr(socket_name(pid).as_bytes())
}

fn stream_socket() -> Result<OwnedFd> {
    // SAFETY: FFI; a new descriptor or -1.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(Error::last_os("socket(AF_UNIX) for a grant connection"));
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The pid of the process at the other end of a unix socket, as the kernel recorded it.
fn peer_pid(fd: &OwnedFd) -> Option<u32> {
    // SAFETY: all-zero is a valid ucred.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: FFI with a valid out-buffer of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0 && cred.pid > 0).then_some(cred.pid as u32)
}

/// Makes sure this process listens on its grant socket. Interfaces that let peers reach their
/// memory call it when they open.
pub fn listen() -> Result<()> {
    with_registry(listen_locked)
}

fn listen_locked(r: &mut Registry) -> Result<()> {
    if r.listener.is_some() {
        return Ok(());
    }
    if let Some(e) = &r.listen_error {
        return Err(Error::NoDevice(e.clone()));
    }
    let fd = stream_socket()?;
    let (addr, len) = sockaddr(r.owner);
    // SAFETY: FFI with a valid address of `len` bytes.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        )
    };
    // SAFETY: FFI on our socket.
    if rc != 0 || unsafe { libc::listen(fd.as_raw_fd(), BACKLOG) } != 0 {
        let e = format!(
            "cannot listen on the grant socket @{}: {} (another process holds the name?); \
             peers cannot be verified, so cross-process memory access is off",
            socket_name(r.owner),
            std::io::Error::last_os_error()
        );
        tracing::warn!("{e}");
        r.listen_error = Some(e.clone());
        return Err(Error::NoDevice(e));
    }
    r.listener = Some(fd);
    Ok(())
}

/// Lets process `pid` reach this process's memory: connects to its grant socket (once per
/// peer process; the connection is shared and closed with the last holder). Fails when `pid`
/// has no grant socket (it is not a rucx process of this host) or when the socket belongs to
/// another process.
pub fn grant_to(pid: u32) -> Result<Arc<Grant>> {
    with_registry(|r| {
        if let Some(g) = r.outgoing.get(&pid).and_then(Weak::upgrade) {
            return Ok(g);
        }
        let fd = stream_socket()?;
        let (addr, len) = sockaddr(pid);
        // SAFETY: FFI with a valid address of `len` bytes.
        let rc = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                &addr as *const libc::sockaddr_un as *const libc::sockaddr,
                len,
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            // A unix stream connect either completes at once or fails; EAGAIN is a full backlog.
            return Err(Error::Unreachable(format!(
                "process {pid} does not accept rucx peers (its grant socket @{}: {e}); it is \
                 not a rucx process of this host, or its backlog is full",
                socket_name(pid)
            )));
        }
        match peer_pid(&fd) {
            Some(p) if p == pid => {}
            other => {
                tracing::warn!(
                    "grant socket @{} belongs to process {other:?}, not {pid}: refusing it",
                    socket_name(pid)
                );
                return Err(Error::Unreachable(format!(
                    "the grant socket of process {pid} belongs to process {other:?}: refusing it"
                )));
            }
        }
        if ptrace_scope() == Some(1) && r.ptracer.is_none() {
            // SAFETY: FFI, no pointers.
            if unsafe { libc::prctl(libc::PR_SET_PTRACER, pid as libc::c_ulong, 0, 0, 0) } == 0 {
                r.ptracer = Some(pid);
                tracing::info!(
                    "yama ptrace_scope is 1: process {pid} may use cma on this process; \
                     later peers use another path"
                );
            }
        }
        // Tell the peer whether we can reach it with cma (it then picks its rendezvous path).
        let b = if may_trace(pid).is_ok() {
            MAY_TRACE
        } else {
            MAY_NOT_TRACE
        };
        // SAFETY: FFI writing one byte from `b` to our connected socket (a fresh socket buffer
        // always has room).
        unsafe {
            libc::send(
                fd.as_raw_fd(),
                &b as *const u8 as *const libc::c_void,
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        let g = Arc::new(Grant { pid, _conn: fd });
        r.outgoing.retain(|_, w| w.strong_count() > 0);
        r.outgoing.insert(pid, Arc::downgrade(&g));
        Ok(g)
    })
}

/// Accepts pending connections on our grant socket and forgets closed ones.
fn refresh(r: &mut Registry) {
    let Some(l) = &r.listener else {
        return;
    };
    let mut accepted = false;
    loop {
        // SAFETY: FFI; null address out-parameters are allowed.
        let fd = unsafe {
            libc::accept4(
                l.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) | Some(libc::ECONNABORTED) => continue,
                Some(libc::EAGAIN) => {}
                _ => tracing::debug!("accept on the grant socket: {e}"),
            }
            break;
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if let Some(pid) = peer_pid(&fd) {
            r.incoming.push(Incoming {
                pid,
                conn: fd,
                it_may_trace_us: None,
            });
            accepted = true;
        }
    }
    if accepted {
        prune(&mut r.incoming, None);
    }
}

/// Reads what each granting process said, and drops connections whose granting side has
/// closed: those of process `only`, or all of them (a look at each connection, no waiting and
/// no allocation: this runs on data paths).
fn prune(incoming: &mut Vec<Incoming>, only: Option<u32>) {
    incoming.retain_mut(|g| {
        if only.is_some_and(|pid| g.pid != pid) {
            return true;
        }
        // A failed look (not expected for an open socket) keeps the connection as it is.
        let ready = ready_now(g.conn.as_raw_fd(), Interest::READABLE).unwrap_or(Ready::empty());
        still_open(g, ready)
    });
}

/// Given what a grant connection is ready for, reads the granting process's byte if it is
/// there, and tells whether the connection is still open.
fn still_open(g: &mut Incoming, ready: Ready) -> bool {
    if ready.contains(Ready::READABLE) {
        let mut b = [0u8; 1];
        // SAFETY: FFI reading at most one byte into `b`.
        let n = unsafe {
            libc::recv(
                g.conn.as_raw_fd(),
                b.as_mut_ptr() as *mut libc::c_void,
                1,
                libc::MSG_DONTWAIT,
            )
        };
        match n {
            1 if g.it_may_trace_us.is_none() => g.it_may_trace_us = Some(b[0] == MAY_TRACE),
            // End of stream, or more than the one byte a granting process writes.
            _ if n >= 0 => return false,
            _ => {}
        }
    }
    !ready.intersects(Ready::HANGUP | Ready::ERROR)
}

/// Whether process `pid` currently lets this process reach its memory: it is this process, or
/// it holds a connection to our grant socket made by itself.
pub fn granted(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    with_registry(|r| {
        refresh(r);
        prune(&mut r.incoming, Some(pid));
        r.incoming.iter().any(|g| g.pid == pid)
    })
}

/// Whether process `pid`, which granted us access, said the kernel lets it trace this process
/// (so it can read our memory with cma). `false` when it has not granted us, said no, or its
/// answer has not arrived: callers then use a path that needs no cma from it.
pub fn peer_may_trace_us(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    with_registry(|r| {
        refresh(r);
        prune(&mut r.incoming, Some(pid));
        r.incoming
            .iter()
            .any(|g| g.pid == pid && g.it_may_trace_us == Some(true))
    })
}

/// How long [`check`] waits for a grant that has not arrived: a peer that exchanged addresses
/// and keys out of band may create its endpoint to us a moment after we unpack its key.
pub const GRANT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// [`granted`], waiting up to `timeout` (sleeping on our grant socket) while process `pid`
/// exists and has not granted us yet.
pub fn wait_granted(pid: u32, timeout: std::time::Duration) -> bool {
    let until = std::time::Instant::now() + timeout;
    // Made at the first wait: a grant that is already there costs no epoll descriptor.
    let mut sleeper: Option<Result<EventSet>> = None;
    loop {
        if granted(pid) {
            return true;
        }
        let left = until.saturating_duration_since(std::time::Instant::now());
        // SAFETY: FFI; signal 0 only checks existence.
        let gone = unsafe { libc::kill(pid as libc::pid_t, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if left.is_zero() || gone {
            return false;
        }
        if sleeper.is_none() {
            let Some(fd) = with_registry(|r| r.listener.as_ref().map(|l| l.as_raw_fd())) else {
                return false;
            };
            sleeper = Some(listener_sleeper(fd));
        }
        // Wake on a new connection, and look again at least every 10 ms (a connection another
        // thread accepted first, or its byte arriving later).
        let nap = left.clamp(std::time::Duration::from_millis(1), LOOK_AGAIN);
        match &sleeper {
            // An error or an interrupted wait only means looking again sooner.
            Some(Ok(set)) => {
                let _ = set.wait_any(Some(nap));
            }
            _ => std::thread::sleep(nap),
        }
    }
}

/// The longest [`wait_granted`] sleeps before it looks at the grants again.
const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_millis(10);

/// An event set that wakes when our grant socket `listener` has a connection to accept (the
/// listener lives as long as the process); an error leaves [`wait_granted`] napping instead.
fn listener_sleeper(listener: std::os::fd::RawFd) -> Result<EventSet> {
    let set = EventSet::new()?;
    set.add(listener, Interest::READABLE, 0)?;
    Ok(set)
}

/// [`wait_granted`] for at most [`GRANT_WAIT`], as an error naming `what` was refused (and
/// logged).
pub fn check(pid: u32, what: &str) -> Result<()> {
    if wait_granted(pid, GRANT_WAIT) {
        return Ok(());
    }
    refuse(pid, what)
}

/// [`granted`] without waiting (for paths inside `progress`), as an error like [`check`]'s.
pub fn check_now(pid: u32, what: &str) -> Result<()> {
    if granted(pid) {
        return Ok(());
    }
    refuse(pid, what)
}

fn refuse(pid: u32, what: &str) -> Result<()> {
    tracing::warn!("refusing {what} of process {pid}: it has not granted this process access");
    Err(Error::RemoteAccess(format!(
        "refusing {what} of process {pid}: that process has no rucx endpoint to this process \
         (its pid came from a peer's address or key, and the kernel does not confirm it)"
    )))
}

/// Accepts pending grants and forgets closed ones (interfaces call it now and then, so the
/// backlog never fills and a peer that left frees its descriptor).
pub fn maintain() {
    with_registry(|r| {
        refresh(r);
        prune(&mut r.incoming, None);
    });
}

/// Yama's `kernel.yama.ptrace_scope`, when Yama is present.
pub fn ptrace_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Whether the kernel lets this process trace `pid` (the check behind `process_vm_readv`), by
/// opening `/proc/<pid>/mem`: nothing of the process is read. The error says why not.
pub fn may_trace(pid: u32) -> std::result::Result<(), String> {
    let path = format!("/proc/{pid}/mem");
    match std::fs::File::open(&path) {
        Ok(_) => Ok(()),
        Err(e) => Err(match e.raw_os_error() {
            Some(libc::ENOENT) => format!("process {pid} does not exist"),
            Some(libc::EACCES) | Some(libc::EPERM) => format!(
                "the kernel forbids tracing process {pid} ({}): cross-memory access to it is off",
                match ptrace_scope() {
                    Some(s) if s > 0 => format!("yama ptrace_scope is {s}"),
                    _ => "another user, a non-dumpable process, or no CAP_SYS_PTRACE".into(),
                }
            ),
            _ => format!("cannot check access to process {pid}: {e}"),
        }),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_granted_and_unknown_pids_are_not() {
        listen().unwrap();
        assert!(granted(std::process::id()));
        // pid 1 is never a rucx process of this test, and has no connection to us.
        assert!(!granted(1));
        assert!(!wait_granted(1, std::time::Duration::from_millis(30)));
        let e = check_now(1, "a test read").unwrap_err();
        assert!(matches!(e, Error::RemoteAccess(_)), "{e}");
        assert!(e.to_string().contains("process 1"), "{e}");
    }

    fn pair() -> (OwnedFd, OwnedFd) {
        let mut sv = [0i32; 2];
        // SAFETY: FFI with a valid two-int out-array.
        let r = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) };
        assert_eq!(r, 0);
        // SAFETY: fresh descriptors we own.
        unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) }
    }

    /// The granting side's byte is read once, kept with the connection, and the connection is
    /// forgotten when the granting side closes it (or writes more than its one byte).
    #[test]
    fn grant_connections_carry_one_byte_and_end_with_their_stream() {
        let (ours, theirs) = pair();
        let mut v = vec![Incoming {
            pid: 42,
            conn: ours,
            it_may_trace_us: None,
        }];
        prune(&mut v, Some(42));
        assert_eq!(
            (v.len(), v[0].it_may_trace_us),
            (1, None),
            "nothing said yet"
        );
        let send = |b: u8| {
            // SAFETY: FFI writing one byte from `b`.
            let n = unsafe {
                libc::send(
                    theirs.as_raw_fd(),
                    &b as *const u8 as *const libc::c_void,
                    1,
                    0,
                )
            };
            assert_eq!(n, 1);
        };
        send(MAY_TRACE);
        prune(&mut v, Some(7));
        assert_eq!(
            v[0].it_may_trace_us, None,
            "another pid's check reads nothing"
        );
        prune(&mut v, None);
        assert_eq!((v.len(), v[0].it_may_trace_us), (1, Some(true)));
        send(MAY_NOT_TRACE);
        prune(&mut v, Some(42));
        assert!(v.is_empty(), "a second byte ends the grant");
        let (a, b) = pair();
        v.push(Incoming {
            pid: 42,
            conn: a,
            it_may_trace_us: None,
        });
        drop(b);
        prune(&mut v, Some(42));
        assert!(v.is_empty(), "a closed grant is forgotten");
    }

    #[test]
    fn granting_a_process_without_a_grant_socket_fails_clearly() {
        // pid 1 (init) never listens on a rucx grant socket.
        let e = grant_to(1).unwrap_err();
        assert!(matches!(e, Error::Unreachable(_)), "{e}");
        assert!(e.to_string().contains("rucx-grant-1"), "{e}");
    }

    #[test]
    fn may_trace_reports_missing_processes() {
        assert!(may_trace(std::process::id()).is_ok());
        let e = may_trace(u32::MAX / 2).unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
    }
}
