//! A worker's transport half: the interfaces it progresses together, and the one event set it
//! sleeps on (UCX's `uct_worker` with its `ucs_async` event set).
//!
//! Each interface offers an event fd (its own [`EventSet`] of sockets, pidfds or wake-up
//! descriptors, or an eventfd). Once [`Worker::watch_events`] was called, the worker keeps those
//! fds in its own set, so one descriptor ([`Worker::event_fd`]) is readable when any interface
//! has work. A [`Waker`] in the same set lets another thread interrupt a sleeper
//! ([`Worker::waker`]). Sleeping is: [`Worker::arm`] every interface, then [`Worker::wait`];
//! nothing on that path allocates.

use crate::caps::EventFlags;
use crate::iface::{EventSink, Iface};
use crate::peer_proc::PeerProcs;
use crate::registry::{AnyIface, AnyMd};
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;
use ucs::async_ctx::{EventSet, Events, Interest, Waker};
use ucs::{Error, Result};

/// Identifies an interface inside its [`Worker`]: its position, in the order it was added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IfaceId(pub usize);

/// Token of the waker in the worker's event set; an interface's token is its index.
const WAKER_TOKEN: u64 = u64::MAX;

/// The descriptors a worker sleeps on.
struct WaitSet {
    set: EventSet,
    /// Events of one wait (reused: waiting allocates nothing).
    events: Events,
    /// The interfaces' event fds are in the set.
    ifaces: bool,
    /// Put in the set by the first [`Worker::waker`] call.
    waker: Option<Arc<Waker>>,
}

/// The interfaces of a worker, progressed together, and the event set they sleep on. Derefs to
/// the slice of interfaces, indexed by [`IfaceId`]'s number.
#[derive(Default)]
pub struct Worker {
    ifaces: Vec<AnyIface>,
    wait: Option<WaitSet>,
    /// The peer processes of the interfaces' endpoints, one entry each whatever the number of
    /// interfaces reaching it (see [`Worker::open_iface`]).
    procs: PeerProcs,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut l = f.debug_list();
        for (i, iface) in self.ifaces.iter().enumerate() {
            l.entry(&format_args!(
                "{i}: {}/{}",
                iface.tl_name(),
                iface.device_name()
            ));
        }
        l.finish()
    }
}

impl Deref for Worker {
    type Target = [AnyIface];
    #[inline]
    fn deref(&self) -> &[AnyIface] {
        &self.ifaces
    }
}

impl DerefMut for Worker {
    #[inline]
    fn deref_mut(&mut self) -> &mut [AnyIface] {
        &mut self.ifaces
    }
}

fn bad_id(id: IfaceId) -> Error {
    Error::InvalidParam(format!("worker has no interface #{}", id.0))
}

impl Worker {
    /// A worker without interfaces and without an event set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens the memory domain and an interface of `tl_name` on `device` (as [`crate::open`])
    /// whose endpoints share this worker's peer processes with its other interfaces: a peer
    /// process reached by several interfaces is watched and granted once. Add the interface
    /// with [`Worker::add_iface`].
    pub fn open_iface(&self, tl_name: &str, device: &str) -> Result<(AnyMd, AnyIface)> {
        crate::registry::open_shared(tl_name, device, &self.procs)
    }

    /// [`Worker::open_iface`] with every interface parameter given.
    pub fn open_iface_with(
        &self,
        tl_name: &str,
        params: &crate::IfaceParams,
    ) -> Result<(AnyMd, AnyIface)> {
        crate::registry::open_with(tl_name, params, &self.procs)
    }

    /// The worker's peer processes (see [`Worker::open_iface`]).
    pub fn peer_procs(&self) -> &PeerProcs {
        &self.procs
    }

    /// Adds an interface (opened with [`Worker::open_iface`], or [`crate::open`] on its own);
    /// its event fd joins the event set when events are watched.
    pub fn add_iface(&mut self, iface: AnyIface) -> Result<IfaceId> {
        let id = IfaceId(self.ifaces.len());
        if let Some(w) = self.wait.as_ref().filter(|w| w.ifaces) {
            if let Some(fd) = iface.event_fd() {
                w.set.add(fd, Interest::READABLE, id.0 as u64)?;
            }
        }
        self.ifaces.push(iface);
        Ok(id)
    }

    fn wait_set(&mut self) -> Result<&mut WaitSet> {
        let w = match self.wait.take() {
            Some(w) => w,
            None => WaitSet {
                set: EventSet::new()?,
                events: Events::with_capacity(8),
                ifaces: false,
                waker: None,
            },
        };
        Ok(self.wait.insert(w))
    }

    /// Puts every interface's event fd in the worker's event set (once; later calls do
    /// nothing), so [`Worker::event_fd`] and [`Worker::wait`] see the interfaces' events.
    pub fn watch_events(&mut self) -> Result<()> {
        let Worker { ifaces, .. } = self;
        let fds: Vec<(usize, RawFd)> = ifaces
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.event_fd().map(|fd| (i, fd)))
            .collect();
        let w = self.wait_set()?;
        if w.ifaces {
            return Ok(());
        }
        for (i, fd) in fds {
            w.set.add(fd, Interest::READABLE, i as u64)?;
        }
        w.ifaces = true;
        Ok(())
    }

    /// The worker's event fd, readable when an interface has events (after arming) or the waker
    /// was signalled; `None` until [`Worker::watch_events`].
    pub fn event_fd(&self) -> Option<RawFd> {
        self.wait
            .as_ref()
            .filter(|w| w.ifaces)
            .map(|w| w.set.as_raw_fd())
    }

    /// The waker in the worker's event set: signalling it from any thread ends a
    /// [`Worker::wait`] (UCX's `ucp_worker_signal`). Creates the event set if needed.
    pub fn waker(&mut self) -> Result<Arc<Waker>> {
        let w = self.wait_set()?;
        if let Some(k) = &w.waker {
            return Ok(Arc::clone(k));
        }
        let k = Arc::new(Waker::new()?);
        w.set.add(k.fd(), Interest::READABLE, WAKER_TOKEN)?;
        w.waker = Some(Arc::clone(&k));
        Ok(k)
    }

    /// Arms every interface that has an event fd for receives and send completions. Gives
    /// `Ok(false)` when an interface has work waiting already (progress instead of sleeping).
    pub fn arm(&mut self) -> Result<bool> {
        for i in &mut self.ifaces {
            if i.event_fd().is_none() {
                continue;
            }
            match i.event_arm(EventFlags::RECV | EventFlags::SEND_COMP) {
                Ok(()) => {}
                Err(Error::Busy(_)) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// The nearest timed work of an interface that no descriptor signals (e.g. a tcp listener
    /// pausing `accept` at the descriptor limit): a sleeper must call progress again by then.
    pub fn wake_within(&self) -> Option<Duration> {
        self.ifaces.iter().filter_map(|i| i.wake_within()).min()
    }

    /// Sleeps on the event set until an armed interface has events, the waker is signalled,
    /// `timeout` passes (`None`: no limit), or an interface's [`Worker::wake_within`] comes. Gives `true` when something happened (a signalled
    /// waker is cleared), `false` on timeout or an interrupted wait. Without an event set it
    /// gives an `InvalidParam` error: nothing could ever end the wait.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<bool> {
        let timeout = match (timeout, self.wake_within()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let Some(w) = self.wait.as_mut() else {
            return Err(Error::InvalidParam(
                "the worker has no event set: call watch_events or waker first".into(),
            ));
        };
        let n = w.set.wait(&mut w.events, timeout)?;
        for ev in w.events.iter() {
            if ev.token == WAKER_TOKEN {
                if let Some(k) = &w.waker {
                    k.drain();
                }
            }
        }
        Ok(n > 0)
    }

    /// The interface `id`.
    pub fn iface(&self, id: IfaceId) -> Result<&AnyIface> {
        self.ifaces.get(id.0).ok_or_else(|| bad_id(id))
    }

    /// The interface `id`, mutably (to create endpoints).
    pub fn iface_mut(&mut self, id: IfaceId) -> Result<&mut AnyIface> {
        self.ifaces.get_mut(id.0).ok_or_else(|| bad_id(id))
    }

    /// Progresses every interface once into `sink`; gives the number of events delivered.
    #[inline]
    pub fn progress<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut n = 0;
        for i in &mut self.ifaces {
            n += i.progress(sink);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ep::Endpoint;
    use crate::testing::Recorder;

    fn self_iface() -> AnyIface {
        crate::open("self", "memory0").unwrap().1
    }

    #[test]
    fn progress_and_sleep_on_the_event_set() {
        let mut w = Worker::new();
        let a = w.add_iface(self_iface()).unwrap();
        w.watch_events().unwrap();
        let b = w.add_iface(self_iface()).unwrap();
        assert_eq!(w.len(), 2);
        assert!(w.event_fd().is_some());
        let dev = w.iface(b).unwrap().device_address().to_vec();
        let addr = w.iface(b).unwrap().iface_address().to_vec();
        let mut ep = w
            .iface_mut(a)
            .unwrap()
            .ep_create_connected(&dev, &addr)
            .unwrap();

        // Nothing to do: armed, and the wait times out.
        assert!(w.arm().unwrap());
        assert!(!w.wait(Some(Duration::ZERO)).unwrap());
        assert!(ep.am_short(1, 42, b"wake").unwrap().is_done());
        // A message arrived on b, added after watch_events: the wait sees it.
        assert!(w.wait(Some(Duration::from_secs(20))).unwrap());
        let mut rec = Recorder::new();
        assert_eq!(w.progress(&mut rec), 1);
        assert_eq!(rec.ams.len(), 1);
        assert_eq!(&rec.ams[0].1[8..], b"wake");
        assert!(w.arm().unwrap());
        assert!(!w.wait(Some(Duration::from_millis(1))).unwrap());
        // A second watch_events changes nothing.
        w.watch_events().unwrap();
    }

    #[test]
    fn waker_ends_a_wait_from_another_thread_and_is_cleared() {
        let mut w = Worker::new();
        w.add_iface(self_iface()).unwrap();
        assert!(w.event_fd().is_none(), "interfaces are not watched");
        let k = w.waker().unwrap();
        assert!(Arc::ptr_eq(&k, &w.waker().unwrap()));
        let t = std::thread::spawn(move || k.wake().unwrap());
        assert!(w.wait(Some(Duration::from_secs(20))).unwrap());
        t.join().unwrap();
        assert!(
            !w.wait(Some(Duration::ZERO)).unwrap(),
            "the wake-up was cleared"
        );
    }

    #[test]
    fn bad_ids_and_waiting_without_an_event_set_are_errors() {
        let mut w = Worker::new();
        assert!(w.is_empty());
        assert!(w.iface(IfaceId(0)).is_err());
        assert!(w.iface_mut(IfaceId(3)).is_err());
        assert!(matches!(w.wait(None), Err(Error::InvalidParam(_))));
        assert!(w.arm().unwrap(), "no interface has work");
    }

    #[test]
    fn arm_reports_waiting_work() {
        let mut w = Worker::new();
        let a = w.add_iface(self_iface()).unwrap();
        w.watch_events().unwrap();
        let dev = w.iface(a).unwrap().device_address().to_vec();
        let addr = w.iface(a).unwrap().iface_address().to_vec();
        let mut ep = w
            .iface_mut(a)
            .unwrap()
            .ep_create_connected(&dev, &addr)
            .unwrap();
        assert!(ep.am_short(0, 1, b"x").unwrap().is_done());
        assert!(!w.arm().unwrap(), "a message waits for progress");
        let mut rec = Recorder::new();
        assert_eq!(w.progress(&mut rec), 1);
        assert!(w.arm().unwrap());
    }
}
