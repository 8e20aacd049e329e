//! The peer processes of a worker's endpoints: for each process one entry, holding the watch
//! on it (`PeerWatch`) and our grant to it ([`crate::grant`]), shared by every endpoint of
//! every interface of the worker that reaches it (a worker with shared-memory and cma
//! endpoints to the workers of four processes holds four entries).
//!
//! The worker hands its registry ([`PeerProcs`]) to each interface it opens
//! ([`crate::Transport::open_iface_shared`]); an interface keeps beside the entry only what is
//! its own (the shared-memory interface its epoll registration, cma its verification and
//! failure reporting). An entry found exited is never handed out again: a new endpoint to its
//! pid watches, and grants, the process that has the pid now.

pub(crate) mod watch;

use crate::grant::Grant;
use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use ucs::Result;
pub(crate) use watch::PeerWatch;

/// One peer process, shared by the worker's endpoints to it; lives while one of them does.
pub(crate) struct PeerProc {
    pid: u32,
    watch: PeerWatch,
    /// Our consent that it maps our segments and reads our memory (none towards ourselves).
    _grant: Option<Arc<Grant>>,
    /// Seen exited (by a look at its watch, or an access the kernel refused because it is
    /// gone): it stays exited, whatever process has its pid later.
    gone: Cell<bool>,
}

impl PeerProc {
    /// Its pid.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The watch on it.
    pub(crate) fn watch(&self) -> &PeerWatch {
        &self.watch
    }

    /// Whether the process has exited (one `poll` of its pidfd until it is seen exited).
    pub(crate) fn exited(&self) -> bool {
        if self.gone.get() {
            return true;
        }
        let gone = self.watch.exited();
        self.gone.set(gone);
        gone
    }

    /// Records that the process has exited (an access to it found it gone).
    pub(crate) fn set_exited(&self) {
        self.gone.set(true);
    }
}

/// The peer processes of one worker, by pid: a handle the worker's interfaces share (cloning
/// it shares the registry; [`Default`] makes a new, empty one).
#[derive(Clone, Default)]
pub struct PeerProcs(Rc<RefCell<Vec<Weak<PeerProc>>>>);

impl std::fmt::Debug for PeerProcs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pids: Vec<u32> = self
            .0
            .borrow()
            .iter()
            .filter_map(Weak::upgrade)
            .map(|p| p.pid)
            .collect();
        f.debug_tuple("PeerProcs").field(&pids).finish()
    }
}

impl PeerProcs {
    /// A new, empty registry (for a worker, or an interface opened on its own).
    pub fn new() -> Self {
        Self::default()
    }

    /// The live process `pid` an endpoint of the worker already reaches. A process found
    /// exited is not handed out: a new endpoint to its pid watches the process that has it now.
    pub(crate) fn find(&self, pid: u32) -> Option<Rc<PeerProc>> {
        let mut v = self.0.borrow_mut();
        v.retain(|w| w.strong_count() > 0);
        v.iter()
            .filter_map(Weak::upgrade)
            .find(|p| p.pid == pid && !p.exited())
    }

    /// Adds process `pid`, watched by `watch` (made before anything of the process was
    /// trusted, such as its segment mapped, so a pid reused later is not mistaken for it), and
    /// grants it access to us (unless it is ourselves).
    pub(crate) fn add(&self, pid: u32, watch: PeerWatch) -> Result<Rc<PeerProc>> {
        let grant = if pid == std::process::id() {
            None
        } else {
            Some(crate::grant::grant_to(pid)?)
        };
        Ok(self.insert(pid, watch, grant))
    }

    /// The live process `pid` ([`PeerProcs::find`]), else a new entry for it, watched before
    /// it is granted ([`PeerProcs::add`]).
    pub(crate) fn get(&self, pid: u32) -> Result<Rc<PeerProc>> {
        match self.find(pid) {
            Some(p) => Ok(p),
            None => self.add(pid, PeerWatch::new(pid)),
        }
    }

    fn insert(&self, pid: u32, watch: PeerWatch, grant: Option<Arc<Grant>>) -> Rc<PeerProc> {
        let p = Rc::new(PeerProc {
            pid,
            watch,
            _grant: grant,
            gone: Cell::new(false),
        });
        self.0.borrow_mut().push(Rc::downgrade(&p));
        p
    }

    /// Adds process `pid` without granting it anything (tests: a process that is not a rucx
    /// peer refuses grants).
    #[cfg(test)]
    pub(crate) fn insert_ungranted(&self, pid: u32, watch: PeerWatch) -> Rc<PeerProc> {
        self.insert(pid, watch, None)
    }

    /// How many processes some endpoint still holds.
    pub fn len(&self) -> usize {
        self.0
            .borrow()
            .iter()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// Whether no endpoint holds any process.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
