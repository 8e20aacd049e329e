//! Messages taken off the unexpected queue by a removing probe ([`Worker::tag_probe`]): the
//! [`Message`] handle, and what its worker does with the ones dropped without being received.

use crate::tag::message::Message;
use crate::tag::state::TagState;
use crate::worker::req::RecvBuf;
use crate::worker::state::TagFamily;
use crate::worker::Worker;
use ucs::Error;

impl TagFamily<'_> {
    /// Discards the messages whose handles were dropped: each is received into nothing (an
    /// eager one finishes at once; one still arriving, or a rendezvous, through a released
    /// request that the worker frees when it ends).
    #[cold]
    pub(crate) fn discard_dropped_msgs(&mut self) {
        for uid in self.own().msg_drops.take() {
            if self.own().take_failed_msg(uid).is_some() {
                continue;
            }
            // The receive's own result (truncated) is of no interest: dropping its request
            // releases it when it finishes.
            drop(self.recv_unexp_now(RecvBuf::Owned(Vec::new()), uid as u64, 0, uid));
        }
    }
}

impl TagState {
    /// When the sender of message `uid` (taken by a probe) failed before the message was
    /// complete: frees what arrived of it and gives the error its receive ends with.
    pub(crate) fn take_failed_msg(&mut self, uid: usize) -> Option<Error> {
        let i = self.msgs_failed.iter().position(|&u| u == uid)?;
        self.msgs_failed.swap_remove(i);
        let u = self.unexp.try_remove(uid)?;
        if let Some(mk) = u.msg_key {
            self.assembling.remove(&mk);
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
        if msg.wid != self.st.worker_id() {
            return Err(Error::InvalidParam(
                "the message belongs to another worker".into(),
            ));
        }
        let uid = msg.into_uid();
        match self.st.tag.take_failed_msg(uid) {
            Some(e) => Err(e),
            None => Ok(uid),
        }
    }
}
