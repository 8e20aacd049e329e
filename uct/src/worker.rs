//! A worker: owns the interfaces it opens, progresses them together, and sleeps on their event
//! file descriptors.

use crate::caps::EventFlags;
use crate::iface::{EventSink, Iface};
use crate::registry::{AnyIface, AnyMd};
use std::time::Duration;
use ucs::{Error, Result};

/// Identifies an interface inside its [`Worker`]; stays valid until that interface is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IfaceId(pub usize);

struct Entry {
    // Field order is drop order: the interface before its memory domain.
    iface: AnyIface,
    md: AnyMd,
}

/// A set of interfaces progressed together (the transport half of `ucp_worker`).
#[derive(Default)]
pub struct Worker {
    entries: Vec<Option<Entry>>,
    /// Reused by [`Worker::wait`] so sleeping allocates nothing after the first call.
    pollfds: Vec<libc::pollfd>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut l = f.debug_list();
        for (id, iface) in self.ifaces() {
            l.entry(&format_args!(
                "{}: {}/{}",
                id.0,
                iface.tl_name(),
                iface.device_name()
            ));
        }
        l.finish()
    }
}

fn bad_id(id: IfaceId) -> Error {
    Error::InvalidParam(format!("worker has no interface #{}", id.0))
}

impl Worker {
    /// A worker without interfaces.
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens transport `tl` on `device` (as listed by [`crate::query_resources`]); an unknown
    /// name gives [`Error::NoDevice`] listing the valid ones.
    pub fn open_iface(&mut self, tl: &str, device: &str) -> Result<IfaceId> {
        let (md, iface) = crate::registry::open(tl, device)?;
        let entry = Some(Entry { iface, md });
        if let Some(i) = self.entries.iter().position(Option::is_none) {
            self.entries[i] = entry;
            Ok(IfaceId(i))
        } else {
            self.entries.push(entry);
            Ok(IfaceId(self.entries.len() - 1))
        }
    }

    /// Closes an interface (endpoints created on it report errors afterwards).
    pub fn close_iface(&mut self, id: IfaceId) -> Result<()> {
        match self.entries.get_mut(id.0) {
            Some(e @ Some(_)) => {
                *e = None;
                Ok(())
            }
            _ => Err(bad_id(id)),
        }
    }

    fn entry(&self, id: IfaceId) -> Result<&Entry> {
        self.entries
            .get(id.0)
            .and_then(Option::as_ref)
            .ok_or_else(|| bad_id(id))
    }

    /// The interface `id`.
    pub fn iface(&self, id: IfaceId) -> Result<&AnyIface> {
        Ok(&self.entry(id)?.iface)
    }

    /// The interface `id`, mutably (to create endpoints).
    pub fn iface_mut(&mut self, id: IfaceId) -> Result<&mut AnyIface> {
        self.entries
            .get_mut(id.0)
            .and_then(Option::as_mut)
            .map(|e| &mut e.iface)
            .ok_or_else(|| bad_id(id))
    }

    /// The memory domain of interface `id`.
    pub fn md(&self, id: IfaceId) -> Result<&AnyMd> {
        Ok(&self.entry(id)?.md)
    }

    /// Every open interface with its id.
    pub fn ifaces(&self) -> impl Iterator<Item = (IfaceId, &AnyIface)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (IfaceId(i), &e.iface)))
    }

    /// Number of open interfaces.
    pub fn len(&self) -> usize {
        self.entries.iter().filter(|e| e.is_some()).count()
    }

    /// True without open interfaces.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Progresses every interface once into `sink`; gives the number of events delivered.
    #[inline]
    pub fn progress<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut n = 0;
        for e in self.entries.iter_mut().flatten() {
            n += e.iface.progress(sink);
        }
        n
    }

    /// Progresses one interface into `sink` (when events must be told apart by interface).
    pub fn progress_iface<S: EventSink>(&mut self, id: IfaceId, sink: &mut S) -> Result<usize> {
        Ok(self.iface_mut(id)?.progress(sink))
    }

    /// Sleeps until an interface has work or `timeout` passes (`None`: no limit). Arms every
    /// interface's event fd for the events it supports; if one is `Busy` (work is waiting) or
    /// has no event fd, returns at once. Gives `true` when there may be work (call progress),
    /// `false` on timeout.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<bool> {
        self.pollfds.clear();
        for e in self.entries.iter_mut().flatten() {
            let ev = e.iface.attr().event_flags;
            let Some(fd) = e.iface.event_fd() else {
                return Ok(true); // cannot sleep on this one: the caller must keep polling
            };
            let arm = ev & (EventFlags::RECV | EventFlags::SEND_COMP);
            match e.iface.event_arm(arm) {
                Ok(()) => {}
                Err(Error::Busy(_)) => return Ok(true),
                Err(err) => return Err(err),
            }
            self.pollfds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        if self.pollfds.is_empty() && timeout.is_none() {
            return Err(Error::InvalidParam(
                "waiting without a timeout on a worker without interfaces would never return"
                    .into(),
            ));
        }
        let ms = match timeout {
            None => -1,
            Some(d) => {
                let ms = d.as_nanos().div_ceil(1_000_000);
                ms.min(i32::MAX as u128) as i32
            }
        };
        // SAFETY: `pollfds` is a valid array of `len` initialised pollfd structs for the call.
        let n = unsafe {
            libc::poll(
                self.pollfds.as_mut_ptr(),
                self.pollfds.len() as libc::nfds_t,
                ms,
            )
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                return Ok(true);
            }
            return Err(Error::io("poll on the worker's event fds", err));
        }
        Ok(n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ep::Endpoint;
    use crate::testing::Recorder;

    #[test]
    fn open_progress_wait() {
        let mut w = Worker::new();
        assert!(w.is_empty());
        let a = w.open_iface("self", "memory0").unwrap();
        let b = w.open_iface("self", "memory0").unwrap();
        assert_eq!(w.len(), 2);
        assert_eq!(w.md(a).unwrap().tl_name(), "self");
        let dev = w.iface(b).unwrap().device_address().to_vec();
        let addr = w.iface(b).unwrap().iface_address().to_vec();
        let mut ep = w
            .iface_mut(a)
            .unwrap()
            .ep_create_connected(&dev, &addr)
            .unwrap();

        // Nothing to do: the wait times out (and leaves the fds armed).
        assert!(!w.wait(Some(Duration::ZERO)).unwrap());
        assert!(ep.am_short(1, 42, b"wake").unwrap().is_done());
        // A message is waiting: wait returns at once, progress delivers it.
        assert!(w.wait(None).unwrap());
        let mut rec = Recorder::new();
        assert_eq!(w.progress(&mut rec), 1);
        assert_eq!(rec.ams.len(), 1);
        assert_eq!(&rec.ams[0].1[8..], b"wake");
        assert!(!w.wait(Some(Duration::from_millis(1))).unwrap());
    }

    #[test]
    fn bad_names_and_ids() {
        let mut w = Worker::new();
        assert!(matches!(
            w.open_iface("nope", "memory0"),
            Err(Error::NoDevice(_))
        ));
        assert!(matches!(
            w.open_iface("self", "eth9"),
            Err(Error::NoDevice(_))
        ));
        assert!(w.iface(IfaceId(0)).is_err());
        let a = w.open_iface("self", "memory0").unwrap();
        w.close_iface(a).unwrap();
        assert!(w.close_iface(a).is_err());
        assert!(w.md(a).is_err());
        let mut rec = Recorder::new();
        assert!(w.progress_iface(a, &mut rec).is_err());
        assert!(w.wait(None).is_err(), "no interfaces and no timeout");
        assert!(!w.wait(Some(Duration::ZERO)).unwrap());
        // The slot is reused.
        assert_eq!(w.open_iface("self", "memory0").unwrap(), a);
    }

    #[test]
    fn endpoint_of_a_closed_iface_errors() {
        let mut w = Worker::new();
        let a = w.open_iface("self", "memory0").unwrap();
        let dev = w.iface(a).unwrap().device_address().to_vec();
        let addr = w.iface(a).unwrap().iface_address().to_vec();
        let mut ep = w
            .iface_mut(a)
            .unwrap()
            .ep_create_connected(&dev, &addr)
            .unwrap();
        w.close_iface(a).unwrap();
        assert!(ep.am_short(0, 0, &[]).is_err());
    }
}
