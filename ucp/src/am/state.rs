//! What the user active-message family keeps per worker: the handlers, and the inbox of the
//! messages queued for a client that takes them after the progress call.

use crate::am::inbox::{AmArrival, AmInbox};
use crate::am_desc::msg::{AmDescHandler, AmMsg, AmRndv};
use crate::worker::api_types::AmHandler;
use crate::worker::api_types::EpHandle;

/// What became of a message given to [`AmState::take_eager`], [`AmState::take_whole`] or
/// [`AmState::take_rndv`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Taken {
    /// Its id has no handler of that kind: not taken.
    No,
    /// Its handler ran.
    ByHandler,
    /// It waits in the inbox.
    Queued,
    /// It waits in the inbox, lent by its transport ([`crate::am::inbox::LentAm`]).
    Lent,
}

/// The handler registered for one id.
#[derive(Default)]
enum Slot {
    #[default]
    Empty,
    /// A whole-message handler.
    Whole(AmHandler),
    /// A descriptor handler.
    Desc(AmDescHandler),
    /// Queued in the inbox as a descriptor handler would get them, small eager messages inline
    /// when `inline_ok`.
    Queued { inline_ok: bool },
    /// Queued in the inbox whole (as a whole-message handler would get them).
    QueuedWhole,
}

/// The user active-message family's state: one handler per id, of either kind (a whole-message
/// [`AmHandler`] or a descriptor [`AmDescHandler`]), in a table indexed by the id (as UCX's
/// handler array is), so a message finds its handler without hashing. The table grows to the
/// highest id registered: at most 65,536 slots.
#[derive(Default)]
pub(crate) struct AmState {
    slots: Vec<Slot>,
    /// The messages of queued ids, for the client.
    pub(crate) inbox: AmInbox,
}

impl AmState {
    /// The slot of `id`, the table grown to hold it.
    fn slot_mut(&mut self, id: u16) -> &mut Slot {
        let i = usize::from(id);
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, Slot::default);
        }
        &mut self.slots[i]
    }

    /// Makes `h` the handler of `id`, replacing any of either kind.
    pub(crate) fn set(&mut self, id: u16, h: AmHandler) {
        *self.slot_mut(id) = Slot::Whole(h);
    }

    /// Makes `h` the descriptor handler of `id`, replacing any of either kind.
    pub(crate) fn set_desc(&mut self, id: u16, h: AmDescHandler) {
        *self.slot_mut(id) = Slot::Desc(h);
    }

    /// Queues the messages of `id` in the inbox (see [`Slot::Queued`], [`Slot::QueuedWhole`]),
    /// replacing any handler.
    pub(crate) fn set_queued(&mut self, id: u16, whole: bool, inline_ok: bool) {
        *self.slot_mut(id) = if whole {
            Slot::QueuedWhole
        } else {
            Slot::Queued { inline_ok }
        };
    }

    /// Removes the handler of `id`, of either kind.
    pub(crate) fn remove(&mut self, id: u16) {
        if let Some(slot) = self.slots.get_mut(usize::from(id)) {
            *slot = Slot::Empty;
        }
    }

    /// Gives whole message `id` from `ep` (user header `hdr`, data `data`) to its
    /// whole-message handler or queues it whole; gives the data back when `id` has neither.
    #[inline]
    pub(crate) fn take_whole(
        &mut self,
        id: u16,
        ep: EpHandle,
        hdr: &[u8],
        data: Vec<u8>,
    ) -> Result<Taken, Vec<u8>> {
        match self.slots.get_mut(usize::from(id)) {
            Some(Slot::Whole(h)) => {
                h(ep, hdr, data);
                Ok(Taken::ByHandler)
            }
            Some(Slot::QueuedWhole) => {
                self.inbox.push(AmArrival::Whole(id, data, ep));
                Ok(Taken::Queued)
            }
            _ => Err(data),
        }
    }

    /// Copies a lent message not taken yet into the inbox: called before a transport
    /// progresses (and may release the bytes it lent).
    #[inline(always)]
    pub(crate) fn unlend(&mut self) {
        if self.inbox.has_lent() {
            self.inbox.unlend();
        }
    }

    /// Gives eager message `id` from `ep` (user header, data) to its handler of either kind or
    /// queues it, with one look at the table: a whole-message handler's copy goes into a
    /// buffer `buf` gives. With `lend`, a queued one may be lent ([`Taken::Lent`]). The C
    /// library's queued ids and the Rust API's whole-message handlers are handled inline, the
    /// rarer kinds out of line ([`AmState::take_eager_rare`]): the fewer values the inline
    /// arms hold, the fewer the registers spilled on the lent message's path.
    #[inline(always)]
    pub(crate) fn take_eager(
        &mut self,
        id: u16,
        ep: EpHandle,
        header: &[u8],
        data: &[u8],
        lend: bool,
        buf: impl FnOnce() -> Vec<u8>,
    ) -> Taken {
        match self.slots.get_mut(usize::from(id)) {
            Some(&mut Slot::Queued { inline_ok }) => {
                if self.inbox.push_eager(id, ep, header, data, inline_ok, lend) {
                    Taken::Lent
                } else {
                    Taken::Queued
                }
            }
            Some(Slot::Whole(h)) => {
                let mut v = buf();
                v.extend_from_slice(data);
                h(ep, header, v);
                Taken::ByHandler
            }
            _ => self.take_eager_rare(id, ep, header, data, buf),
        }
    }

    /// [`AmState::take_eager`] of an id with a descriptor handler, queued whole, or with no
    /// handler.
    #[inline(never)]
    fn take_eager_rare(
        &mut self,
        id: u16,
        ep: EpHandle,
        header: &[u8],
        data: &[u8],
        buf: impl FnOnce() -> Vec<u8>,
    ) -> Taken {
        match self.slots.get_mut(usize::from(id)) {
            Some(Slot::Desc(h)) => {
                h(ep, AmMsg::Eager { header, data });
                Taken::ByHandler
            }
            Some(Slot::QueuedWhole) => {
                let mut v = buf();
                v.extend_from_slice(data);
                self.inbox.push(AmArrival::Whole(id, v, ep));
                Taken::Queued
            }
            _ => Taken::No,
        }
    }

    /// Gives rendezvous message `id` from `ep` (user header, descriptor of its data) to its
    /// descriptor handler or queues it.
    pub(crate) fn take_rndv(&mut self, id: u16, ep: EpHandle, header: &[u8], d: AmRndv) -> Taken {
        match self.slots.get_mut(usize::from(id)) {
            Some(Slot::Queued { .. }) => {
                self.inbox
                    .push(AmArrival::Rndv(id, Box::new((header.to_vec(), d)), ep));
                Taken::Queued
            }
            Some(Slot::Desc(h)) => {
                h(ep, AmMsg::Rndv { header, data: d });
                Taken::ByHandler
            }
            _ => Taken::No,
        }
    }

    /// `id` has a descriptor handler or is queued as one would get it.
    #[inline]
    pub(crate) fn has_desc(&self, id: u16) -> bool {
        matches!(
            self.slots.get(usize::from(id)),
            Some(Slot::Desc(_) | Slot::Queued { .. })
        )
    }

    /// The whole-message handler of `id`.
    #[cfg(test)]
    fn handler(&mut self, id: u16) -> Option<&mut AmHandler> {
        match self.slots.get_mut(usize::from(id)) {
            Some(Slot::Whole(h)) => Some(h),
            _ => None,
        }
    }

    /// The descriptor handler of `id`.
    #[cfg(test)]
    fn desc_handler(&mut self, id: u16) -> Option<&mut AmDescHandler> {
        match self.slots.get_mut(usize::from(id)) {
            Some(Slot::Desc(h)) => Some(h),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole() -> AmHandler {
        Box::new(|_, _, _| {})
    }

    #[test]
    fn one_handler_per_id_of_either_kind() {
        let mut s = AmState::default();
        assert!(s.handler(3).is_none() && !s.has_desc(3));
        s.set(3, whole());
        assert!(s.handler(3).is_some() && !s.has_desc(3));
        s.set_desc(3, Box::new(|_, _| {}));
        assert!(s.handler(3).is_none() && s.has_desc(3) && s.desc_handler(3).is_some());
        s.set(3, whole());
        assert!(s.handler(3).is_some() && !s.has_desc(3));
        assert!(
            s.desc_handler(3).is_none(),
            "the replaced descriptor handler is gone"
        );
        s.remove(3);
        assert!(s.handler(3).is_none() && s.desc_handler(3).is_none());
        s.remove(40_000);
        assert_eq!(
            s.slots.len(),
            4,
            "removing an unregistered id does not grow the table"
        );
    }

    #[test]
    fn highest_id_fits() {
        let mut s = AmState::default();
        s.set_desc(u16::MAX, Box::new(|_, _| {}));
        assert!(s.has_desc(u16::MAX) && !s.has_desc(0));
        assert!(s.handler(u16::MAX).is_none());
    }
}
