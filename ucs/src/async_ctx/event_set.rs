//! An epoll event set: file descriptors registered with a `u64` token, and a wait for readiness
//! into a caller-owned [`Events`] buffer (mio's shape: nothing allocates while waiting).
//!
//! Every layer that waits for descriptors uses this set: a transport interface keeps its own
//! sockets, pidfds and wake-up descriptors in one and offers the set's descriptor as its event
//! fd; the worker nests those event fds, and a [`Waker`](super::Waker), in its own set and
//! sleeps on it.

use crate::status::{Error, Result};
use bitflags::bitflags;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

bitflags! {
    /// What to wait for on a file descriptor.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Interest: u32 {
        /// Data to read (or a peer hang-up).
        const READABLE = 1;
        /// Room to write.
        const WRITABLE = 1 << 1;
        /// Report each change once (edge-triggered, `EPOLLET`) instead of while the state holds.
        const EDGE = 1 << 2;
    }

    /// What a file descriptor is ready for.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Ready: u32 {
        /// Readable.
        const READABLE = 1;
        /// Writable.
        const WRITABLE = 1 << 1;
        /// An error condition (`EPOLLERR`).
        const ERROR = 1 << 2;
        /// The peer hung up (`EPOLLHUP` / `EPOLLRDHUP`).
        const HANGUP = 1 << 3;
    }
}

/// One readiness event: the token given at registration and what the descriptor is ready for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The registration's token.
    pub token: u64,
    /// What happened.
    pub ready: Ready,
}

impl Event {
    fn from_epoll(ev: &libc::epoll_event) -> Self {
        // Copy the fields out: `epoll_event` is packed on x86-64.
        let (bits, token) = (ev.events, ev.u64);
        let mut ready = Ready::empty();
        if bits & (libc::EPOLLIN | libc::EPOLLPRI) as u32 != 0 {
            ready |= Ready::READABLE;
        }
        if bits & libc::EPOLLOUT as u32 != 0 {
            ready |= Ready::WRITABLE;
        }
        if bits & libc::EPOLLERR as u32 != 0 {
            ready |= Ready::ERROR;
        }
        if bits & (libc::EPOLLHUP | libc::EPOLLRDHUP) as u32 != 0 {
            ready |= Ready::HANGUP;
        }
        Event { token, ready }
    }
}

/// A caller-owned buffer that [`EventSet::wait`] fills.
pub struct Events {
    buf: Vec<libc::epoll_event>,
    len: usize,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Events {
    /// Room for `capacity` events per wait (at least 1).
    pub fn with_capacity(capacity: usize) -> Self {
        Events {
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; capacity.max(1)],
            len: 0,
        }
    }
    /// Most events one wait can return.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }
    /// Number of events from the last wait.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when the last wait returned nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The events of the last wait.
    pub fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        self.buf[..self.len].iter().map(Event::from_epoll)
    }
    /// The `i`-th event of the last wait.
    pub fn get(&self, i: usize) -> Option<Event> {
        self.buf[..self.len].get(i).map(Event::from_epoll)
    }
}

/// Converts a timeout to epoll/poll milliseconds, rounding up so a short timeout still sleeps.
fn timeout_ms(timeout: Option<Duration>) -> libc::c_int {
    match timeout {
        None => -1,
        Some(d) => {
            let ms = d.as_nanos().div_ceil(1_000_000);
            ms.min(libc::c_int::MAX as u128) as libc::c_int
        }
    }
}

/// An epoll set: file descriptors with tokens, and a wait for readiness.
#[derive(Debug)]
pub struct EventSet {
    epfd: OwnedFd,
}

impl EventSet {
    /// A new empty set.
    pub fn new() -> Result<Self> {
        // SAFETY: plain syscall without pointer arguments.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os("epoll_create1"));
        }
        // SAFETY: `fd` is a fresh descriptor this function owns.
        let epfd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventSet { epfd })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, interest: Interest, token: u64) -> Result<()> {
        let mut bits = libc::EPOLLRDHUP as u32;
        if interest.contains(Interest::READABLE) {
            bits |= libc::EPOLLIN as u32;
        }
        if interest.contains(Interest::WRITABLE) {
            bits |= libc::EPOLLOUT as u32;
        }
        if interest.contains(Interest::EDGE) {
            bits |= libc::EPOLLET as u32;
        }
        let mut ev = libc::epoll_event {
            events: bits,
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call; the kernel checks
        // `fd` and reports a bad one as an error.
        let rc = unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut ev) };
        if rc < 0 {
            let what = match op {
                libc::EPOLL_CTL_ADD => "adding",
                libc::EPOLL_CTL_MOD => "modifying",
                _ => "removing",
            };
            return Err(Error::last_os(format!("epoll_ctl: {what} fd {fd}")));
        }
        Ok(())
    }

    /// Watches `fd` for `interest`, reporting events with `token`. Gives an `Io` error for a bad
    /// descriptor or one already in the set.
    pub fn add(&self, fd: RawFd, interest: Interest, token: u64) -> Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, interest, token)
    }

    /// Changes the interest and token of a descriptor in the set.
    pub fn modify(&self, fd: RawFd, interest: Interest, token: u64) -> Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, interest, token)
    }

    /// Stops watching `fd`.
    pub fn remove(&self, fd: RawFd) -> Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, Interest::empty(), 0)
    }

    /// Waits until a descriptor is ready or `timeout` passes (`None`: no limit; sub-millisecond
    /// timeouts round up to 1 ms, `Some(ZERO)` only checks). Fills `events` and gives their
    /// number; an interrupted wait gives 0.
    pub fn wait(&self, events: &mut Events, timeout: Option<Duration>) -> Result<usize> {
        let cap = events.buf.len().min(libc::c_int::MAX as usize) as libc::c_int;
        // SAFETY: `events.buf` has room for `cap` epoll_events and stays borrowed for the call.
        let n = unsafe {
            libc::epoll_wait(
                self.epfd.as_raw_fd(),
                events.buf.as_mut_ptr(),
                cap,
                timeout_ms(timeout),
            )
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            events.len = 0;
            if err.kind() == std::io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(Error::io("epoll_wait", err));
        }
        events.len = n as usize;
        Ok(events.len)
    }

    /// Waits like [`EventSet::wait`] but only tells whether a descriptor is ready (`true`) or
    /// the wait timed out or was interrupted (`false`), without a caller buffer: for a sleeper
    /// that will look at everything afterwards anyway.
    pub fn wait_any(&self, timeout: Option<Duration>) -> Result<bool> {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: `ev` is room for one epoll_event and lives across the call.
        let n = unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), &mut ev, 1, timeout_ms(timeout)) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(Error::io("epoll_wait", err));
        }
        Ok(n > 0)
    }
}

impl AsRawFd for EventSet {
    /// The epoll descriptor: itself readable while any member is ready, so a set can be nested
    /// in another set or in `poll`.
    fn as_raw_fd(&self) -> RawFd {
        self.epfd.as_raw_fd()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::Waker;
    use super::*;
    use std::sync::Arc;

    /// A pipe as two owned descriptors (read end, write end).
    fn pipe() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
        assert_eq!(rc, 0, "pipe2");
        // SAFETY: fresh descriptors owned by nobody else.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    fn write_byte(fd: &OwnedFd) {
        // SAFETY: writes one byte from a live buffer.
        let n = unsafe { libc::write(fd.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        assert_eq!(n, 1);
    }

    fn read_all(fd: &OwnedFd) -> usize {
        let mut buf = [0u8; 256];
        let mut total = 0;
        loop {
            // SAFETY: reads into a live buffer of the given size.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return total;
            }
            total += n as usize;
        }
    }

    const WATCHDOG: Option<Duration> = Some(Duration::from_secs(10));

    #[test]
    fn event_set_reports_readable_with_token_then_modify_and_remove() {
        let set = EventSet::new().unwrap();
        let mut events = Events::with_capacity(8);
        let (r, w) = pipe();
        set.add(r.as_raw_fd(), Interest::READABLE, 7).unwrap();
        assert_eq!(set.wait(&mut events, Some(Duration::ZERO)).unwrap(), 0);
        write_byte(&w);
        assert_eq!(set.wait(&mut events, Some(Duration::ZERO)).unwrap(), 1);
        let ev = events.get(0).unwrap();
        assert_eq!(ev.token, 7);
        assert!(ev.ready.contains(Ready::READABLE));
        // Level-triggered: still reported while unread.
        assert_eq!(set.wait(&mut events, Some(Duration::ZERO)).unwrap(), 1);
        set.modify(r.as_raw_fd(), Interest::READABLE, 8).unwrap();
        set.wait(&mut events, Some(Duration::ZERO)).unwrap();
        assert_eq!(events.iter().map(|e| e.token).collect::<Vec<_>>(), vec![8]);
        set.remove(r.as_raw_fd()).unwrap();
        assert_eq!(set.wait(&mut events, Some(Duration::ZERO)).unwrap(), 0);
        assert!(events.is_empty());
    }

    #[test]
    fn wait_any_sees_a_nested_set_become_ready() {
        let inner = EventSet::new().unwrap();
        let outer = EventSet::new().unwrap();
        let (r, w) = pipe();
        inner.add(r.as_raw_fd(), Interest::READABLE, 1).unwrap();
        outer.add(inner.as_raw_fd(), Interest::READABLE, 2).unwrap();
        assert!(!outer.wait_any(Some(Duration::ZERO)).unwrap());
        write_byte(&w);
        assert!(outer.wait_any(WATCHDOG).unwrap());
        read_all(&r);
        assert!(!outer.wait_any(Some(Duration::ZERO)).unwrap());
    }

    #[test]
    fn event_set_errors_are_typed() {
        let set = EventSet::new().unwrap();
        let (r, _w) = pipe();
        assert!(matches!(
            set.add(-1, Interest::READABLE, 1),
            Err(Error::Io { .. })
        ));
        assert!(matches!(set.remove(r.as_raw_fd()), Err(Error::Io { .. })));
        set.add(r.as_raw_fd(), Interest::READABLE, 1).unwrap();
        let err = set.add(r.as_raw_fd(), Interest::READABLE, 2).unwrap_err();
        assert!(err.to_string().contains("adding fd"), "{err}");
    }

    #[test]
    fn event_set_writable_and_hangup() {
        let set = EventSet::new().unwrap();
        let mut events = Events::with_capacity(4);
        let (r, w) = pipe();
        set.add(w.as_raw_fd(), Interest::WRITABLE, 1).unwrap();
        set.add(r.as_raw_fd(), Interest::READABLE, 2).unwrap();
        set.wait(&mut events, Some(Duration::ZERO)).unwrap();
        let got: Vec<Event> = events.iter().collect();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].token, 1);
        assert!(got[0].ready.contains(Ready::WRITABLE));
        set.remove(w.as_raw_fd()).unwrap();
        drop(w);
        set.wait(&mut events, Some(Duration::ZERO)).unwrap();
        let ev = events.get(0).expect("hang-up is reported");
        assert_eq!(ev.token, 2);
        assert!(ev.ready.contains(Ready::HANGUP));
    }

    #[test]
    fn event_set_edge_triggered_reports_each_change_once() {
        let set = EventSet::new().unwrap();
        let mut events = Events::with_capacity(4);
        let (r, w) = pipe();
        set.add(r.as_raw_fd(), Interest::READABLE | Interest::EDGE, 3)
            .unwrap();
        write_byte(&w);
        assert_eq!(set.wait(&mut events, Some(Duration::ZERO)).unwrap(), 1);
        assert_eq!(set.wait(&mut events, Some(Duration::ZERO)).unwrap(), 0);
        write_byte(&w);
        assert_eq!(set.wait(&mut events, Some(Duration::ZERO)).unwrap(), 1);
        assert_eq!(read_all(&r), 2);
    }

    #[test]
    fn event_set_fills_at_most_capacity() {
        let set = EventSet::new().unwrap();
        let mut events = Events::with_capacity(2);
        let pipes: Vec<_> = (0..5).map(|_| pipe()).collect();
        for (i, (r, w)) in pipes.iter().enumerate() {
            set.add(r.as_raw_fd(), Interest::READABLE, i as u64)
                .unwrap();
            write_byte(w);
        }
        assert_eq!(events.capacity(), 2);
        assert_eq!(set.wait(&mut events, Some(Duration::ZERO)).unwrap(), 2);
        // Reading every ready descriptor as reported drains all five in a few rounds.
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..5 {
            set.wait(&mut events, Some(Duration::ZERO)).unwrap();
            for ev in events.iter() {
                read_all(&pipes[ev.token as usize].0);
                seen.insert(ev.token);
            }
        }
        assert_eq!(seen.len(), 5);
    }

    #[test]
    fn waker_wakes_a_waiting_set_from_another_thread() {
        let set = EventSet::new().unwrap();
        let waker = Arc::new(Waker::new().unwrap());
        set.add(waker.fd(), Interest::READABLE, 42).unwrap();
        let mut events = Events::with_capacity(4);
        assert_eq!(waker.drain(), 0, "not signalled yet");
        let w = Arc::clone(&waker);
        let t = std::thread::spawn(move || w.wake().unwrap());
        let n = set.wait(&mut events, WATCHDOG).unwrap();
        t.join().unwrap();
        assert_eq!(n, 1);
        assert_eq!(events.get(0).unwrap().token, 42);
        waker.wake().unwrap();
        assert_eq!(waker.drain(), 2);
        assert_eq!(waker.drain(), 0);
        assert_eq!(set.wait(&mut events, Some(Duration::ZERO)).unwrap(), 0);
    }
}
