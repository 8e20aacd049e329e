//! Waiting for events: an epoll [`EventSet`] of file descriptors, a [`Waker`] any thread can
//! signal, and a [`TimerQueue`] of deadlines on an injectable clock.
//!
//! These are the one way rucx waits ([`ready_now`] only looks at one descriptor in passing). A transport interface keeps the descriptors it sleeps on
//! (sockets, pidfds, a wake-up eventfd) in an `EventSet` and offers that set's descriptor as its
//! event fd; `uct::Worker` nests its interfaces' event fds and a `Waker` in its own set; ucp's
//! worker sleeps on that set, bounding the sleep by the next deadline of its `TimerQueue`
//! (keepalive, close timeouts), and runs due timers from progress. Nothing allocates on the
//! wait path: events go into a caller-owned [`Events`] buffer and due timers into a reused
//! vector.

mod event_set;
mod ready;
mod timer;
mod waker;

pub use event_set::{Event, EventSet, Events, Interest, Ready};
pub use ready::ready_now;
pub use timer::{TimerId, TimerQueue};
pub use waker::Waker;
