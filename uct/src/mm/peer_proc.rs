//! The peer processes of an interface's endpoints: what every endpoint to one process shares
//! (the watch on it, its pidfd's place in the interface's epoll set, our grant to it), held
//! once per process however many endpoints reach it (a hub with 1,000 endpoints to workers in
//! four processes holds four).

use super::watch::{EpollEntry, EpollPeers, PeerWatch};
use crate::grant::Grant;
use std::cell::Cell;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use ucs::Result;

/// One peer process, shared by the interface's endpoints to it; lives while one of them does.
pub(crate) struct PeerProc {
    pid: u32,
    watch: PeerWatch,
    /// Its pidfd in the interface's epoll set, until an endpoint finds it exited (every
    /// endpoint to it then fails) or the last endpoint to it drops.
    in_epoll: Cell<Option<EpollEntry>>,
    /// Our consent that it maps our segments and reads our memory (none towards ourselves).
    _grant: Option<Arc<Grant>>,
}

impl PeerProc {
    /// Whether the process has exited (one `poll` of its pidfd).
    pub(crate) fn exited(&self) -> bool {
        self.watch.exited()
    }

    /// Takes its pidfd out of the epoll set (it exited: its pidfd stays readable, and would
    /// wake a sleeper again and again).
    pub(crate) fn unwatch(&self) {
        drop(self.in_epoll.take());
    }
}

/// An interface's peer processes, by pid.
#[derive(Default)]
pub(crate) struct PeerProcs(Vec<Weak<PeerProc>>);

impl PeerProcs {
    /// The live process `pid` one of our endpoints already reaches. A process found exited is
    /// not handed out: a new endpoint to its pid watches the process that has it now.
    pub(crate) fn find(&mut self, pid: u32) -> Option<Rc<PeerProc>> {
        self.0.retain(|w| w.strong_count() > 0);
        self.0
            .iter()
            .filter_map(Weak::upgrade)
            .find(|p| p.pid == pid && !p.exited())
    }

    /// Adds process `pid` (watched by `watch`, made before its segment was mapped, so a pid
    /// reused later is not mistaken for it): grants it access to us (unless it is ourselves)
    /// and counts its pidfd in `set`.
    pub(crate) fn add(
        &mut self,
        pid: u32,
        watch: PeerWatch,
        set: &Rc<EpollPeers>,
    ) -> Result<Rc<PeerProc>> {
        let grant = if pid == std::process::id() {
            None
        } else {
            Some(crate::grant::grant_to(pid)?)
        };
        let in_epoll = set.add(&watch)?;
        let p = Rc::new(PeerProc {
            pid,
            watch,
            in_epoll: Cell::new(in_epoll),
            _grant: grant,
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

    fn epoll_set() -> Rc<EpollPeers> {
        let s = std::os::unix::net::UnixDatagram::unbound().expect("a datagram socket");
        EpollPeers::new(Rc::new(std::os::fd::OwnedFd::from(s)))
    }

    #[test]
    fn endpoints_to_one_process_share_it_until_it_exits_or_the_last_drops() {
        let set = epoll_set();
        let mut procs = PeerProcs::default();
        let me = std::process::id();
        assert!(procs.find(me).is_none());
        let a = procs.add(me, PeerWatch::new(me), &set).unwrap();
        let b = procs.find(me).expect("a live process is found again");
        assert!(Rc::ptr_eq(&a, &b));
        assert!(procs.find(me + 1).is_none(), "another pid is not it");
        drop((a, b));
        assert!(procs.find(me).is_none());
        assert_eq!(procs.len(), 0, "a process no endpoint holds is forgotten");

        // An exited process is not handed out again: its pid gets a new watch. (Added without
        // `add`: a process that is not a rucx peer refuses grants.)
        let mut child = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .unwrap();
        let pid = child.id();
        let watch = PeerWatch::new(pid);
        let p = Rc::new(PeerProc {
            pid,
            in_epoll: Cell::new(set.add(&watch).unwrap()),
            watch,
            _grant: None,
        });
        procs.0.push(Rc::downgrade(&p));
        assert!(procs.find(pid).is_some_and(|q| Rc::ptr_eq(&p, &q)));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(p.exited());
        assert!(procs.find(pid).is_none(), "an exited process is not reused");
        p.unwatch();
        assert!(p.in_epoll.take().is_none(), "unwatch leaves the epoll set");
    }
}
