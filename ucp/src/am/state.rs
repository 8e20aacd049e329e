//! What the user active-message family keeps per worker: the handlers.

use crate::am_desc::msg::AmDescHandler;
use crate::worker::api_types::AmHandler;
use std::collections::HashMap;

/// The user active-message family's state: one handler per id, of either kind (a whole-message
/// [`AmHandler`] or a descriptor [`AmDescHandler`]).
#[derive(Default)]
pub(crate) struct AmState {
    handlers: HashMap<u16, AmHandler>,
    desc_handlers: HashMap<u16, AmDescHandler>,
}

impl AmState {
    /// Makes `h` the handler of `id`, replacing any of either kind.
    pub(crate) fn set(&mut self, id: u16, h: AmHandler) {
        self.desc_handlers.remove(&id);
        self.handlers.insert(id, h);
    }

    /// Makes `h` the descriptor handler of `id`, replacing any of either kind.
    pub(crate) fn set_desc(&mut self, id: u16, h: AmDescHandler) {
        self.handlers.remove(&id);
        self.desc_handlers.insert(id, h);
    }

    /// Removes the handler of `id`, of either kind.
    pub(crate) fn remove(&mut self, id: u16) {
        self.handlers.remove(&id);
        self.desc_handlers.remove(&id);
    }

    /// The whole-message handler of `id`.
    pub(crate) fn handler(&mut self, id: u16) -> Option<&mut AmHandler> {
        self.handlers.get_mut(&id)
    }

    /// The descriptor handler of `id`.
    pub(crate) fn desc_handler(&mut self, id: u16) -> Option<&mut AmDescHandler> {
        self.desc_handlers.get_mut(&id)
    }

    /// `id` has a descriptor handler. The empty test first: a worker with whole-message
    /// handlers only pays no lookup.
    #[inline]
    pub(crate) fn has_desc(&self, id: u16) -> bool {
        !self.desc_handlers.is_empty() && self.desc_handlers.contains_key(&id)
    }
}
