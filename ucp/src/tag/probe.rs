//! Messages taken off the unexpected queue by a removing probe ([`Worker::tag_probe`]): the
//! [`Message`] handle, and what its worker does with the ones dropped without being received.

use crate::worker::req::RecvBuf;
use crate::worker::state::State;
use crate::worker::Worker;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use ucs::Error;

/// An unexpected message taken off the queue by a removing probe (valid with that worker only).
///
/// Receive it with [`Worker::tag_msg_recv`]. Dropped instead (from any thread), it is
/// discarded: its worker receives it into nothing at its next probe or clock-reading progress
/// call (one in 16), which releases its data and lets a synchronous or rendezvous sender
/// finish.
#[must_use = "receive it with tag_msg_recv; dropping it discards the message"]
pub struct Message {
    /// The owning worker's id ([`Worker::id`]).
    pub(crate) wid: u32,
    pub(crate) uid: usize,
    /// The owning worker's list of dropped messages (`None` once the message was received).
    drops: Option<Arc<MsgDrops>>,
}

impl Message {
    pub(crate) fn new(wid: u32, uid: usize, drops: &Arc<MsgDrops>) -> Self {
        Message {
            wid,
            uid,
            drops: Some(Arc::clone(drops)),
        }
    }

    /// The message's id in its worker, consuming the handle without discarding the message
    /// (the caller receives it).
    pub(crate) fn into_uid(mut self) -> usize {
        self.drops = None;
        self.uid
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        if let Some(d) = self.drops.take() {
            d.push(self.uid);
        }
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("worker", &self.wid)
            .field("uid", &self.uid)
            .finish()
    }
}

impl PartialEq for Message {
    fn eq(&self, o: &Self) -> bool {
        (self.wid, self.uid) == (o.wid, o.uid)
    }
}

impl Eq for Message {}

/// What a worker shares with the [`Message`]s it hands out: the ids of those dropped since it
/// last discarded them. Messages may drop on any thread (a [`crate::MtWorker`]'s caller).
#[derive(Default)]
pub(crate) struct MsgDrops {
    uids: Mutex<Vec<usize>>,
    /// Set when a message is dropped, cleared when the worker takes the list.
    any: AtomicBool,
}

impl MsgDrops {
    fn push(&self, uid: usize) {
        self.uids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(uid);
        self.any.store(true, Ordering::Release);
    }

    /// True when a message was dropped since the worker last took the list.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    fn take(&self) -> Vec<usize> {
        self.any.store(false, Ordering::Relaxed);
        std::mem::take(&mut *self.uids.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl State {
    /// Discards the messages whose handles were dropped: each is received into nothing (an
    /// eager one finishes at once; one still arriving, or a rendezvous, through a released
    /// request that the worker frees when it ends).
    #[cold]
    pub(crate) fn discard_dropped_msgs(&mut self) {
        for uid in self.tag.msg_drops.take() {
            if self.take_failed_msg(uid).is_some() {
                continue;
            }
            // The receive's own result (truncated) is of no interest: dropping its request
            // releases it when it finishes.
            drop(self.recv_unexp_now(RecvBuf::Owned(Vec::new()), uid as u64, 0, uid));
        }
    }

    /// When the sender of message `uid` (taken by a probe) failed before the message was
    /// complete: frees what arrived of it and gives the error its receive ends with.
    fn take_failed_msg(&mut self, uid: usize) -> Option<Error> {
        let i = self.tag.msgs_failed.iter().position(|&u| u == uid)?;
        self.tag.msgs_failed.swap_remove(i);
        let u = self.tag.unexp.try_remove(uid)?;
        if let Some(mk) = u.msg_key {
            self.tag.assembling.remove(&mk);
        }
        Some(Error::PeerFailure(
            "the sender of the probed message failed before sending all of it".into(),
        ))
    }
}

impl Worker {
    /// Unexpected messages this worker holds the data of: queued ones, and those a removing
    /// probe took that were not received or discarded yet.
    pub fn unexpected_count(&self) -> usize {
        self.st.tag.unexp.len() + self.st.tag.small_unexp.len()
    }

    /// Checks that `msg` belongs to this worker, giving its id here (the handle is consumed;
    /// another worker's message goes back to its own worker, which discards it).
    /// A message whose sender failed before it was complete gives `PeerFailure`.
    pub(crate) fn msg_uid(&mut self, msg: Message) -> ucs::Result<usize> {
        if msg.wid != self.st.id {
            return Err(Error::InvalidParam(
                "the message belongs to another worker".into(),
            ));
        }
        let uid = msg.into_uid();
        match self.st.take_failed_msg(uid) {
            Some(e) => Err(e),
            None => Ok(uid),
        }
    }
}
