//! What a worker keeps for the families beyond the MPI slice: listeners and client
//! connections under way ([`crate::conn`]), active-message data and descriptors the client
//! holds ([`crate::am`]), stream data it was lent ([`crate::stream`]), endpoints made for
//! active-message replies, and the wake-up descriptor ([`crate::wakeup`]).

use crate::ffi::*;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use ucs::async_ctx::{EventSet, Interest};

/// Progress calls between two polls of the listeners and client connections (a poll is a
/// system call per socket; a wake-up from `ucp_worker_wait` polls on the next call).
pub const SOCKET_POLL_EVERY: u32 = 16;

/// Active-message data the client keeps after its handler returned `UCS_INPROGRESS`.
pub enum Held {
    /// An eager message: header and data in one buffer; the client holds a pointer to the data.
    Data(Vec<u8>),
    /// A message sent by rendezvous, its data still at the sender.
    Rndv(Box<ucp::AmRndv>),
}

/// The worker's extra state; borrowed only while no client code runs.
pub struct Ext {
    /// Listeners of this worker (`Listener` addresses).
    pub listeners: Vec<usize>,
    /// Client endpoints whose connection is under way or failed unreported (`Ep` addresses).
    pub connecting: Vec<usize>,
    /// Endpoints this library made to give an active-message handler a reply endpoint.
    pub implicit: Vec<usize>,
    /// Held active-message data and descriptors, by the pointer the client holds.
    pub held: HashMap<usize, Held>,
    /// Stream data lent by `ucp_stream_recv_data_nb`, by pointer.
    pub stream_data: HashMap<usize, Vec<u8>>,
    /// Progress calls until the next socket poll.
    pub countdown: u32,
    /// The epoll set `ucp_worker_get_efd` gives: rucx's worker event fd and the sockets
    /// (with `UCP_FEATURE_WAKEUP` only).
    pub efd: Option<EventSet>,
    /// The client's epoll set our set was added to (`UCP_WORKER_PARAM_FIELD_EVENT_FD`).
    pub external: Option<RawFd>,
}

/// Token of rucx's worker event fd in [`Ext::efd`].
const WORKER_TOKEN: u64 = 0;
/// Token of a socket in [`Ext::efd`].
const SOCKET_TOKEN: u64 = 1;

impl Ext {
    /// The extra state of a new worker; with `UCP_FEATURE_WAKEUP` its epoll set holds rucx's
    /// event fd, and is added to the client's own epoll set `external` when given.
    pub fn new(w: &ucp::Worker, external: Option<RawFd>) -> Result<Ext, Status> {
        let efd = match w.efd() {
            Ok(fd) => {
                let set = EventSet::new().map_err(|_| UCS_ERR_IO_ERROR)?;
                set.add(fd, Interest::READABLE, WORKER_TOKEN)
                    .map_err(|_| UCS_ERR_IO_ERROR)?;
                Some(set)
            }
            Err(_) => None,
        };
        if let (Some(set), Some(user)) = (&efd, external) {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: 0,
            };
            // SAFETY: plain syscall on the client's epoll descriptor with a valid event.
            if unsafe { libc::epoll_ctl(user, libc::EPOLL_CTL_ADD, set.as_raw_fd(), &mut ev) } != 0
            {
                return Err(UCS_ERR_INVALID_PARAM);
            }
        }
        Ok(Ext {
            listeners: Vec::new(),
            connecting: Vec::new(),
            implicit: Vec::new(),
            held: HashMap::new(),
            stream_data: HashMap::new(),
            countdown: 1,
            efd,
            external,
        })
    }

    /// Watches a socket (readable or writable) in the wake-up set, if there is one.
    pub fn watch(&self, fd: RawFd, writable: bool) {
        if let Some(set) = &self.efd {
            let interest = if writable {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            if let Err(e) = set.add(fd, interest, SOCKET_TOKEN) {
                tracing::debug!("wake-up set: {e}");
            }
        }
    }

    /// Stops watching a socket.
    pub fn unwatch(&self, fd: RawFd) {
        if let Some(set) = &self.efd {
            let _ = set.remove(fd);
        }
    }

    /// True while listeners or client connections need polling.
    pub fn has_sockets(&self) -> bool {
        !self.listeners.is_empty() || !self.connecting.is_empty()
    }
}
