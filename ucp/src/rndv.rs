//! Rendezvous: large messages move by RMA (get_zcopy or put_zcopy) or an active-message pipeline
//! after an RTS/RTR handshake; `send` is the sender's side, `recv` the receiver's.
//!
//! The receiver picks the data path per message from its endpoint's
//! [`ProtoConfig::rndv_for`](crate::wireup::ProtoConfig::rndv_for), which the performance
//! models chose (`RUCX_PROTO_INFO=y` prints it). Over shared memory with cma every rendezvous
//! size goes by get_zcopy: the receiver reads the sender's buffer once, in
//! [`ProtoConfig::rndv_frag`](crate::wireup::ProtoConfig::rndv_frag) steps between which its
//! worker goes on progressing (`RndvFamily::get_step`), so with traffic both ways each core reads
//! the other's data while the other reads its own. The AM pipeline (after an RTR the sender
//! streams the data in AM-lane bcopy fragments, packed with `copy_payload` straight into the
//! transport's buffer; the receiver copies each into the receive's buffer) moves what no RMA
//! lane can, and sizes up to `rndv_am_max` where the models favour it; its sender registers
//! nothing for the RTS (it carries no remote key).
//!
//! Data in a shared segment (`tag_send_mapped` from a posix/sysv `mem_map`) is announced with
//! the AM lane's key, and the receiver reads it in place with get_zcopy on that lane, whatever
//! the size and the RMA lane: one copy, no system call. The key is unpacked by the lane's
//! endpoint ([`uct::Endpoint::peer_rkey_unpack`]), which keeps the sender's segment mapped for
//! the next messages, checks that each key names memory of its own peer, and unmaps it all
//! when the endpoint goes (closed, or failed with its peer).

mod recv;
mod send;
pub(crate) mod stages;

use crate::worker::req::Rndv;
use std::collections::VecDeque;
use ucs::{Error, Outcome, Result};
use uct::{Iov, RemoteKey};

/// Rendezvous reads [`RndvState::gets`] holds without allocating.
const GETS_ROOM: usize = 64;

/// What the rendezvous family keeps per worker (the worker's `State::rndv`).
pub(crate) struct RndvState {
    /// Rendezvous reads on a shared-memory device with fragments left (request key and wire
    /// id): progress moves one fragment of the front one per call, round robin (see
    /// `RndvFamily::get_step`). Made with room for [`GETS_ROOM`], so a steady stream allocates
    /// nothing.
    gets: VecDeque<(usize, u64)>,
}

impl Default for RndvState {
    fn default() -> Self {
        RndvState {
            gets: VecDeque::with_capacity(GETS_ROOM),
        }
    }
}

/// Where [`zcopy_run`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZcopyRun {
    /// Back-pressure: the rest waits for the next try.
    Blocked,
    /// One operation started, bytes are left, and the caller asked for one at a time.
    Paused,
    /// Every byte is on its way (or moved).
    Started,
}

/// Moves bytes `*offset..total` of rendezvous transfer `x` (a get into the receive's buffer
/// or a put from the send's data, both registered as `x.memh`, at `x.remote_addr` under
/// `x.rkey` on the peer) in zero-copy operations of at most `chunk` bytes, each started by
/// `op(local, remote address, key)`. Operations still in flight are counted in
/// `x.inflight`; bytes moved at once are added to `moved`. With `one_at_a_time`, stops after
/// one operation (shared-memory gets, so the worker goes on progressing between fragments).
#[allow(clippy::too_many_arguments)]
pub(crate) fn zcopy_run(
    x: &mut Rndv,
    offset: &mut usize,
    moved: &mut usize,
    total: usize,
    chunk: usize,
    one_at_a_time: bool,
    what: &str,
    mut op: impl FnMut(Iov<'_>, u64, &RemoteKey) -> Result<Outcome<()>>,
) -> Result<ZcopyRun> {
    let (Some(memh), Some(rkey)) = (x.memh.as_ref(), x.rkey.as_ref()) else {
        return Err(Error::InvalidParam(format!("{what} without registration")));
    };
    while *offset < total {
        let n = chunk.min(total - *offset);
        let iov = Iov::new(memh, *offset, n)?;
        match op(iov, x.remote_addr + *offset as u64, rkey)? {
            Outcome::NoResource => return Ok(ZcopyRun::Blocked),
            Outcome::InProgress => x.inflight += 1,
            Outcome::Done(()) => *moved += n,
        }
        *offset += n;
        if one_at_a_time && *offset < total {
            return Ok(ZcopyRun::Paused);
        }
    }
    Ok(ZcopyRun::Started)
}

impl RndvState {
    /// Whether a rendezvous read waits for its next fragment (progress has work).
    #[inline]
    pub(crate) fn has_reads(&self) -> bool {
        !self.gets.is_empty()
    }

    /// Queues rendezvous read `key` (wire id `wire`) to move its next fragment on a later
    /// progress call.
    pub(crate) fn queue_read(&mut self, key: usize, wire: u64) {
        self.gets.push_back((key, wire));
    }

    /// The rendezvous read to move a fragment of now, taken from the queue.
    pub(crate) fn next_read(&mut self) -> Option<(usize, u64)> {
        self.gets.pop_front()
    }
}
