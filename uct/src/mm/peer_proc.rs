//! The peer processes of an interface's endpoints as the interface sees them: the worker's
//! entry for each ([`crate::peer_proc`]: the watch and our grant) and its pidfd's place in the
//! interface's epoll set, held once per process however many endpoints reach it (a hub with
//! 1,000 endpoints to workers in four processes holds four).

use crate::peer_proc::watch::{EpollEntry, EpollPeers};
use crate::peer_proc::PeerProc;
use std::cell::Cell;
use std::rc::{Rc, Weak};
use ucs::Result;

/// One peer process, shared by the interface's endpoints to it; lives while one of them does.
pub(crate) struct MmPeer {
    /// The worker's entry for the process.
    proc: Rc<PeerProc>,
    /// Its pidfd in the interface's epoll set, until an endpoint finds it exited (every
    /// endpoint to it then fails) or the last endpoint to it drops.
    in_epoll: Cell<Option<EpollEntry>>,
}

impl MmPeer {
    /// Whether the process has exited (one `poll` of its pidfd until it is seen exited).
    pub(crate) fn exited(&self) -> bool {
        self.proc.exited()
    }

    /// Takes its pidfd out of the epoll set (it exited: its pidfd stays readable, and would
    /// wake a sleeper again and again).
    pub(crate) fn unwatch(&self) {
        drop(self.in_epoll.take());
    }
}

#[cfg(test)]
impl super::MmEp {
    /// The worker's entry for the endpoint's peer process.
    pub(crate) fn peer_proc(&self) -> &Rc<PeerProc> {
        &self.shared.peer.proc
    }
}

/// An interface's peer processes.
#[derive(Default)]
pub(crate) struct MmPeers(Vec<Weak<MmPeer>>);

impl MmPeers {
    /// The interface's entry for `proc` (a live process from the worker's registry), made
    /// with its pidfd counted in `set` when none of the interface's endpoints reaches it yet.
    pub(crate) fn get(&mut self, proc: Rc<PeerProc>, set: &Rc<EpollPeers>) -> Result<Rc<MmPeer>> {
        self.0.retain(|w| w.strong_count() > 0);
        if let Some(p) = self
            .0
            .iter()
            .filter_map(Weak::upgrade)
            .find(|p| Rc::ptr_eq(&p.proc, &proc))
        {
            return Ok(p);
        }
        let in_epoll = set.add(proc.watch())?;
        let p = Rc::new(MmPeer {
            proc,
            in_epoll: Cell::new(in_epoll),
        });
        self.0.push(Rc::downgrade(&p));
        Ok(p)
    }

    /// How many processes are held (live or not yet pruned).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::peer_proc::{PeerProcs, PeerWatch};

    fn epoll_set() -> Rc<EpollPeers> {
        let s = std::os::unix::net::UnixDatagram::unbound().expect("a datagram socket");
        EpollPeers::new(Rc::new(std::os::fd::OwnedFd::from(s)))
    }

    #[test]
    fn endpoints_to_one_process_share_it_until_it_exits_or_the_last_drops() {
        let set = epoll_set();
        let procs = PeerProcs::new();
        let mut peers = MmPeers::default();
        let me = std::process::id();
        let a = peers.get(procs.get(me).unwrap(), &set).unwrap();
        let b = peers.get(procs.get(me).unwrap(), &set).unwrap();
        assert!(Rc::ptr_eq(&a, &b), "one entry per process");
        assert_eq!((peers.len(), procs.len()), (1, 1));
        drop((a, b));
        assert_eq!(procs.len(), 0, "a process no endpoint holds is forgotten");
        let c = peers.get(procs.get(me).unwrap(), &set).unwrap();
        assert_eq!(peers.len(), 1, "the dropped entry was pruned");

        // An exited process is not handed out again: its pid gets a new entry.
        let mut child = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .unwrap();
        let pid = child.id();
        let p = procs.insert_ungranted(pid, PeerWatch::new(pid));
        let q = peers.get(p.clone(), &set).unwrap();
        assert!(Rc::ptr_eq(&q, &peers.get(p.clone(), &set).unwrap()));
        assert!(q.in_epoll_held(), "its pidfd is counted in the epoll set");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(q.exited());
        assert!(procs.find(pid).is_none(), "an exited process is not reused");
        q.unwatch();
        assert!(!q.in_epoll_held(), "unwatch leaves the epoll set");
        drop(c);
    }

    impl MmPeer {
        fn in_epoll_held(&self) -> bool {
            let e = self.in_epoll.take();
            let held = e.is_some();
            self.in_epoll.set(e);
            held
        }
    }
}
