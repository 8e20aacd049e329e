//! The handle of a message a removing probe took off the unexpected queue, and the list its
//! worker keeps of the ones dropped without being received.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// An unexpected message taken off the queue by a removing probe (valid with that worker only).
///
/// Receive it with [`Worker::tag_msg_recv`](crate::Worker::tag_msg_recv). Dropped instead
/// (from any thread), it is discarded: its worker receives it into nothing at its next probe
/// or clock-reading progress call (one in 16), which releases its data and lets a synchronous
/// or rendezvous sender finish.
#[must_use = "receive it with tag_msg_recv; dropping it discards the message"]
pub struct Message {
    /// The owning worker's id ([`Worker::id`](crate::Worker::id)).
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

    pub(crate) fn take(&self) -> Vec<usize> {
        self.any.store(false, Ordering::Relaxed);
        std::mem::take(&mut *self.uids.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
