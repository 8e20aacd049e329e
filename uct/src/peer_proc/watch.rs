//! Watching peer processes for exit, with one pidfd per peer process.
//!
//! Every endpoint and interface of this process that talks to a process shares one pidfd for
//! it, from a process-wide registry keyed by pid: a worker with a thousand endpoints to the
//! processes of one host holds one descriptor per peer process, not one per endpoint. The
//! pidfd closes when the last watcher of the process drops. A watch found already exited is
//! not handed out again: a later request for that pid opens a new pidfd, so a pid reused by a
//! new process is watched as that process.
//!
//! An interface puts the pidfds of its endpoints' peers in its epoll set once each
//! ([`EpollPeers`]), however many of its endpoints watch the same process; the set is made on
//! first use, when someone is about to sleep on the interface.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::{Arc, Mutex, Weak};
use ucs::async_ctx::{ready_now, EventSet, Interest, Ready};
use ucs::Result;

/// A pidfd of one peer process, shared by all its watchers in this process.
pub(crate) struct Pidfd {
    pid: u32,
    fd: OwnedFd,
}

impl Drop for Pidfd {
    fn drop(&mut self) {
        with_registry(|r| {
            if r.get(&self.pid).is_some_and(|w| w.strong_count() == 0) {
                r.remove(&self.pid);
            }
        });
    }
}

/// The pidfds of this process by pid.
type Pidfds = HashMap<u32, Weak<Pidfd>>;

/// The process-wide pidfds, and the process that made them (a forked child starts over).
static REGISTRY: Mutex<Option<(u32, Pidfds)>> = Mutex::new(None);

fn with_registry<T>(f: impl FnOnce(&mut Pidfds) -> T) -> T {
    let mut g = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    let me = std::process::id();
    if g.as_ref().is_none_or(|(owner, _)| *owner != me) {
        *g = Some((me, HashMap::new()));
    }
    f(&mut g.as_mut().expect("registry just made").1)
}

/// Whether the process behind `fd` has exited (its pidfd is readable).
fn pidfd_exited(fd: RawFd) -> bool {
    ready_now(fd, Interest::READABLE).is_ok_and(|r| r.intersects(Ready::READABLE | Ready::HANGUP))
}

/// Watches a peer process for exit.
pub(crate) enum PeerWatch {
    /// A pidfd (shared with the process's other watchers): readable once the process has exited.
    Pidfd(Arc<Pidfd>),
    /// Fallback without pidfd: `kill(pid, 0)`.
    Pid(libc::pid_t),
}

impl PeerWatch {
    /// Watches process `pid`: the pidfd this process already holds for it while that process
    /// lives, else a new one (or the `kill` fallback when `pidfd_open` fails).
    pub(crate) fn new(pid: u32) -> Self {
        // A stale watch found in the registry is dropped only after the lock is released (its
        // drop takes the lock).
        let (found, _stale) = with_registry(|r| match r.get(&pid).and_then(Weak::upgrade) {
            Some(p) if !pidfd_exited(p.fd.as_raw_fd()) => (Some(p), None),
            stale => {
                let fresh = open_pidfd(pid).map(|fd| Arc::new(Pidfd { pid, fd }));
                if let Some(p) = &fresh {
                    r.insert(pid, Arc::downgrade(p));
                }
                (fresh, stale)
            }
        });
        match found {
            Some(p) => PeerWatch::Pidfd(p),
            None => PeerWatch::Pid(pid as libc::pid_t),
        }
    }

    pub(crate) fn exited(&self) -> bool {
        match self {
            PeerWatch::Pidfd(p) => pidfd_exited(p.fd.as_raw_fd()),
            // SAFETY: FFI; signal 0 only checks existence.
            PeerWatch::Pid(pid) => unsafe {
                libc::kill(*pid, 0) != 0
                    && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
            },
        }
    }
}

/// Whether process `pid` has exited, looked at once with a pidfd of its own (or `kill` without
/// pidfd), outside the registry: allocates nothing, for paths inside `progress`.
pub(crate) fn exited_now(pid: u32) -> bool {
    match open_pidfd(pid) {
        Some(fd) => pidfd_exited(fd.as_raw_fd()),
        None => PeerWatch::Pid(pid as libc::pid_t).exited(),
    }
}

fn open_pidfd(pid: u32) -> Option<OwnedFd> {
    // SAFETY: FFI; pidfd_open returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor we own.
    Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// An interface's event set (its event fd): its wake-up socket and the pidfds of its
/// endpoints' peers, with how many endpoints watch each pidfd. The epoll set itself is made by
/// the first [`EpollPeers::set`] call (the first time someone wants to sleep on the interface),
/// so an interface that is only ever polled holds no epoll descriptor; until then the pidfds
/// are only counted.
pub(crate) struct EpollPeers {
    /// The interface's wake-up socket, the set's first member.
    wake: Rc<OwnedFd>,
    set: OnceCell<EventSet>,
    users: RefCell<HashMap<RawFd, usize>>,
}

impl EpollPeers {
    pub(crate) fn new(wake: Rc<OwnedFd>) -> Rc<Self> {
        Rc::new(EpollPeers {
            wake,
            set: OnceCell::new(),
            users: RefCell::new(HashMap::new()),
        })
    }

    /// The epoll set, made now (with the wake-up socket and every pidfd watched so far) if
    /// this is the first call.
    pub(crate) fn set(&self) -> Result<&EventSet> {
        if let Some(s) = self.set.get() {
            return Ok(s);
        }
        let s = EventSet::new()?;
        let wake = self.wake.as_raw_fd();
        s.add(wake, Interest::READABLE, wake as u64)?;
        for &fd in self.users.borrow().keys() {
            s.add(fd, Interest::READABLE, fd as u64)?;
        }
        Ok(self.set.get_or_init(|| s))
    }

    /// Counts `watch`'s pidfd as watched (it joins the epoll set, if made, once whatever the
    /// number of endpoints watching it) until the returned entry drops; `None` for a watch
    /// without pidfd.
    pub(crate) fn add(self: &Rc<Self>, watch: &PeerWatch) -> Result<Option<EpollEntry>> {
        let PeerWatch::Pidfd(p) = watch else {
            return Ok(None);
        };
        let fd = p.fd.as_raw_fd();
        let mut users = self.users.borrow_mut();
        let n = users.entry(fd).or_insert(0);
        if *n == 0 {
            if let Some(set) = self.set.get() {
                if let Err(e) = set.add(fd, Interest::READABLE, fd as u64) {
                    users.remove(&fd);
                    return Err(e);
                }
            }
        }
        *n += 1;
        Ok(Some(EpollEntry {
            set: self.clone(),
            pidfd: p.clone(),
        }))
    }
}

/// One endpoint's use of a pidfd in an interface's epoll set; the last use of a pidfd to drop
/// takes it out of the set.
pub(crate) struct EpollEntry {
    set: Rc<EpollPeers>,
    pidfd: Arc<Pidfd>,
}

impl Drop for EpollEntry {
    fn drop(&mut self) {
        let fd = self.pidfd.fd.as_raw_fd();
        let mut users = self.set.users.borrow_mut();
        let Some(n) = users.get_mut(&fd) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            users.remove(&fd);
            if let Some(set) = self.set.set.get() {
                // The pidfd is still open (held by `self.pidfd`), so removing it cannot fail.
                let _ = set.remove(fd);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn in_epoll(set: &EpollPeers, fd: RawFd) -> bool {
        // Modifying fails for a descriptor not in the set.
        set.set().unwrap().modify(fd, Interest::READABLE, 0).is_ok()
    }

    fn wake_socket() -> Rc<OwnedFd> {
        let s = std::os::unix::net::UnixDatagram::unbound().expect("a datagram socket");
        Rc::new(OwnedFd::from(s))
    }

    #[test]
    fn one_pidfd_per_process_shared_until_the_last_watch_drops() {
        let mut child = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        let a = PeerWatch::new(pid);
        let b = PeerWatch::new(pid);
        let (PeerWatch::Pidfd(pa), PeerWatch::Pidfd(pb)) = (&a, &b) else {
            panic!("pidfd_open failed for a live child");
        };
        assert!(
            Arc::ptr_eq(pa, pb),
            "two watches of one process share its pidfd"
        );
        let fd = pa.fd.as_raw_fd();

        let set = EpollPeers::new(wake_socket());
        let ea = set.add(&a).unwrap().expect("a pidfd entry");
        let eb = set.add(&b).unwrap().expect("a pidfd entry");
        assert!(in_epoll(&set, fd));
        drop(ea);
        assert!(in_epoll(&set, fd), "still watched by the other endpoint");
        drop(eb);
        assert!(
            !in_epoll(&set, fd),
            "the last entry takes the pidfd out of the set"
        );

        assert!(!a.exited() && !b.exited());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            a.exited() && b.exited(),
            "the shared pidfd reports the exit to both"
        );
        // An exited watch is not handed out again.
        let c = PeerWatch::new(pid);
        if let PeerWatch::Pidfd(pc) = &c {
            assert!(!Arc::ptr_eq(pa, pc));
        }
        drop((a, b));
        assert!(
            with_registry(|r| r.get(&pid).is_none_or(|w| w.strong_count() > 0)),
            "no dead entry left for the pid"
        );
    }

    #[test]
    fn the_epoll_set_is_made_on_first_use_with_the_watches_made_before() {
        let mut child = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .expect("spawn sleep");
        let w = PeerWatch::new(child.id());
        let PeerWatch::Pidfd(p) = &w else {
            panic!("pidfd_open failed for a live child");
        };
        let pidfd = p.fd.as_raw_fd();
        let wake = wake_socket();
        let wake_fd = wake.as_raw_fd();
        let set = EpollPeers::new(wake);
        let entry = set.add(&w).unwrap().expect("a pidfd entry");
        assert!(set.set.get().is_none(), "no epoll set before first use");
        assert!(
            in_epoll(&set, wake_fd),
            "the wake-up socket is in the new set"
        );
        assert!(
            in_epoll(&set, pidfd),
            "a pidfd counted before is in the new set"
        );
        drop(entry);
        assert!(!in_epoll(&set, pidfd), "the last entry takes the pidfd out");
        // A watch added after the set exists joins it at once.
        let again = set.add(&w).unwrap().expect("a pidfd entry");
        assert!(in_epoll(&set, pidfd));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            set.set()
                .unwrap()
                .wait_any(Some(std::time::Duration::from_secs(10)))
                .unwrap(),
            "the peer's exit wakes a sleeper on the set"
        );
        drop(again);
    }
}
