//! The async context: an epoll event set for file descriptors, an eventfd for wake-ups, timers on
//! an injectable clock, and an optional progress thread.
//!
//! The pieces work alone or together:
//! - [`EventSet`]: add/modify/remove a file descriptor with a `u64` token, and wait with a timeout
//!   into a caller-owned [`Events`] buffer (mio's shape; nothing allocates while waiting).
//! - [`Waker`]: an eventfd any thread can signal to interrupt a wait.
//! - [`TimerQueue`]: one-shot and periodic timers by deadline; [`TimerQueue::expire`] gives the
//!   ids of due timers for a time the caller supplies, so tests drive it with
//!   [`ManualClock`](crate::time::ManualClock) and never sleep.
//! - [`AsyncContext`]: all three on one [`Clock`]. The worker drives it from its progress with
//!   [`AsyncContext::poll_once`]; or [`AsyncContext::start_progress_thread`] moves the epoll wait
//!   to a thread that hands events to the worker through an [`MpmcQueue`] and wakes it through an
//!   eventfd (UCX's "thread" async mode). Timers always run on the worker.
//!
//! Tokens `u64::MAX` and `u64::MAX - 1` are reserved (the context's waker and the thread's stop
//! signal).

use crate::mpmc::MpmcQueue;
use crate::status::{Error, Result};
use crate::time::{Clock, MonotonicClock};
use bitflags::bitflags;
use slab::Slab;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
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

/// Token of the context's own [`Waker`] in its event set; events with it are reported as
/// [`AsyncEvent::Wakeup`].
pub const WAKER_TOKEN: u64 = u64::MAX;
/// Token of the progress thread's stop signal.
const STOP_TOKEN: u64 = u64::MAX - 1;

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
}

impl AsRawFd for EventSet {
    /// The epoll descriptor: itself readable while any member is ready, so a set can be nested
    /// in another set or in `poll`.
    fn as_raw_fd(&self) -> RawFd {
        self.epfd.as_raw_fd()
    }
}

/// An eventfd that any thread can signal to wake a waiter.
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// A new, unsignalled waker.
    pub fn new() -> Result<Self> {
        // SAFETY: plain syscall without pointer arguments.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(Error::last_os("eventfd"));
        }
        // SAFETY: `fd` is a fresh descriptor this function owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Waker { fd })
    }

    /// Signals the waker: its descriptor becomes readable. Safe to call from any thread, any
    /// number of times.
    pub fn wake(&self) -> Result<()> {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64, as eventfd requires.
        let n = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            // EAGAIN: the counter is saturated, so the waker is signalled already.
            if err.kind() != std::io::ErrorKind::WouldBlock {
                return Err(Error::io("eventfd write", err));
            }
        }
        Ok(())
    }

    /// Clears the signal; gives the number of wakes since the last drain (0 if none).
    pub fn drain(&self) -> u64 {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64, as eventfd requires.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut count as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if n == std::mem::size_of::<u64>() as isize {
            count
        } else {
            0
        }
    }

    /// The eventfd, to put in an event set or `poll`.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Identifies a timer in a [`TimerQueue`]; stays unique after the timer is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId(u64);

impl TimerId {
    fn new(index: usize, generation: u32) -> Self {
        TimerId((u64::from(generation) << 32) | index as u64)
    }
    fn index(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }
    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// The id as a number (for logs).
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

#[derive(Debug)]
struct Timer {
    deadline: Duration,
    period: Option<Duration>,
    generation: u32,
}

/// One-shot and periodic timers ordered by deadline. Times are offsets from a [`Clock`]'s
/// origin; the queue never reads a clock itself.
#[derive(Debug, Default)]
pub struct TimerQueue {
    timers: Slab<Timer>,
    /// (deadline, sequence, index, generation); entries of canceled timers are skipped lazily.
    heap: BinaryHeap<Reverse<(Duration, u64, usize, u32)>>,
    seq: u64,
    generation: u32,
}

impl TimerQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a timer due at `deadline`; with a `period` it fires again every period after that.
    /// Gives [`Error::InvalidParam`] for a zero period or too many timers.
    pub fn add(&mut self, deadline: Duration, period: Option<Duration>) -> Result<TimerId> {
        if period == Some(Duration::ZERO) {
            return Err(Error::InvalidParam(
                "a periodic timer needs a non-zero period".into(),
            ));
        }
        if self.timers.len() >= u32::MAX as usize {
            return Err(Error::InvalidParam("too many timers".into()));
        }
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        let index = self.timers.insert(Timer {
            deadline,
            period,
            generation,
        });
        self.push_heap(deadline, index, generation);
        Ok(TimerId::new(index, generation))
    }

    fn push_heap(&mut self, deadline: Duration, index: usize, generation: u32) {
        self.seq += 1;
        self.heap
            .push(Reverse((deadline, self.seq, index, generation)));
    }

    fn live(&self, index: usize, generation: u32, deadline: Duration) -> bool {
        self.timers
            .get(index)
            .is_some_and(|t| t.generation == generation && t.deadline == deadline)
    }

    /// Cancels a timer; false if it already fired (one-shot) or was canceled.
    pub fn cancel(&mut self, id: TimerId) -> bool {
        match self.timers.get(id.index()) {
            Some(t) if t.generation == id.generation() => {
                self.timers.remove(id.index());
                // Drop stale heap entries once they dominate.
                if self.heap.len() > 2 * self.timers.len() + 32 {
                    let timers = &self.timers;
                    self.heap.retain(|Reverse((d, _, i, g))| {
                        timers
                            .get(*i)
                            .is_some_and(|t| t.generation == *g && t.deadline == *d)
                    });
                }
                true
            }
            _ => false,
        }
    }

    /// Appends the ids of timers due at `now` to `due`, earliest first, and gives their number.
    /// One-shot timers are removed; a periodic timer fires once per call even if several periods
    /// passed, and is rescheduled to its first deadline after `now` (keeping its phase).
    /// Allocates nothing once `due` and the queue have reached their working size.
    pub fn expire(&mut self, now: Duration, due: &mut Vec<TimerId>) -> usize {
        let mut n = 0;
        while let Some(&Reverse((deadline, _, index, generation))) = self.heap.peek() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            if !self.live(index, generation, deadline) {
                continue;
            }
            due.push(TimerId::new(index, generation));
            n += 1;
            let t = &mut self.timers[index];
            match t.period {
                Some(period) => {
                    let p = period.as_nanos();
                    let missed = (now - deadline).as_nanos() / p;
                    let next_ns = deadline.as_nanos() + p * (missed + 1);
                    let next = u64::try_from(next_ns)
                        .map(Duration::from_nanos)
                        .unwrap_or(Duration::MAX);
                    t.deadline = next;
                    self.push_heap(next, index, generation);
                }
                None => {
                    self.timers.remove(index);
                }
            }
        }
        n
    }

    /// The earliest deadline of a live timer.
    pub fn next_deadline(&mut self) -> Option<Duration> {
        while let Some(&Reverse((deadline, _, index, generation))) = self.heap.peek() {
            if self.live(index, generation, deadline) {
                return Some(deadline);
            }
            self.heap.pop();
        }
        None
    }

    /// Number of live timers.
    pub fn len(&self) -> usize {
        self.timers.len()
    }

    /// True without live timers.
    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
    }
}

/// What [`AsyncContext::poll_once`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A registered file descriptor is ready.
    Fd(Event),
    /// A timer fired.
    Timer(TimerId),
    /// The context's [`Waker`] was signalled.
    Wakeup,
}

struct ProgressThread {
    queue: Arc<MpmcQueue<Event>>,
    /// Signalled by the thread after it queues events; the worker sleeps on it.
    notify: Arc<Waker>,
    stop_flag: Arc<AtomicBool>,
    stop: Arc<Waker>,
    handle: JoinHandle<()>,
}

/// Event set, waker and timers on one clock, driven from worker progress or by a progress
/// thread.
pub struct AsyncContext<C: Clock = MonotonicClock> {
    set: Arc<EventSet>,
    waker: Arc<Waker>,
    timers: TimerQueue,
    clock: C,
    events: Events,
    due: Vec<TimerId>,
    /// Registered descriptors with their interest and token (to switch trigger modes).
    fds: HashMap<RawFd, (Interest, u64)>,
    thread: Option<ProgressThread>,
    /// Events the stopped progress thread had queued, delivered by the next poll.
    backlog: Vec<Event>,
}

impl<C: Clock> std::fmt::Debug for AsyncContext<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncContext")
            .field("fds", &self.fds.len())
            .field("timers", &self.timers.len())
            .field("thread", &self.thread.is_some())
            .finish()
    }
}

fn check_token(token: u64) -> Result<()> {
    if token >= STOP_TOKEN {
        return Err(Error::InvalidParam(format!(
            "token {token:#x} is reserved by the async context"
        )));
    }
    Ok(())
}

/// Sleeps until `fd` is readable or `timeout` passes.
fn poll_readable(fd: RawFd, timeout: Option<Duration>) -> Result<()> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms(timeout)) };
    if rc < 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(Error::io("poll", err));
        }
    }
    Ok(())
}

impl<C: Clock> AsyncContext<C> {
    /// A context on `clock` (use [`ManualClock`](crate::time::ManualClock) in tests).
    pub fn new(clock: C) -> Result<Self> {
        let set = EventSet::new()?;
        let waker = Waker::new()?;
        set.add(waker.fd(), Interest::READABLE, WAKER_TOKEN)?;
        Ok(AsyncContext {
            set: Arc::new(set),
            waker: Arc::new(waker),
            timers: TimerQueue::new(),
            clock,
            events: Events::with_capacity(64),
            due: Vec::with_capacity(16),
            fds: HashMap::new(),
            thread: None,
            backlog: Vec::new(),
        })
    }

    /// The clock timers run on.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The waker: clone the `Arc` to another thread and call [`Waker::wake`] to interrupt
    /// [`AsyncContext::poll_once`], which then reports [`AsyncEvent::Wakeup`].
    pub fn waker(&self) -> Arc<Waker> {
        Arc::clone(&self.waker)
    }

    /// A descriptor that is readable when `poll_once` has something to report from file
    /// descriptors or the waker (the epoll set; in thread mode the thread's notify eventfd), for
    /// nesting this context in another wait. Timers do not make it readable.
    pub fn event_fd(&self) -> RawFd {
        match &self.thread {
            Some(t) => t.notify.fd(),
            None => self.set.as_raw_fd(),
        }
    }

    fn effective(&self, interest: Interest) -> Interest {
        if self.thread.is_some() {
            interest | Interest::EDGE
        } else {
            interest
        }
    }

    /// Watches `fd`, reporting [`AsyncEvent::Fd`] with `token`. In progress-thread mode the
    /// registration is edge-triggered (each readiness change is reported once). Gives
    /// [`Error::InvalidParam`] for a reserved token, `Io` for a bad or duplicate descriptor.
    pub fn add_fd(&mut self, fd: RawFd, interest: Interest, token: u64) -> Result<()> {
        check_token(token)?;
        self.set.add(fd, self.effective(interest), token)?;
        self.fds.insert(fd, (interest, token));
        Ok(())
    }

    /// Changes the interest and token of a watched descriptor.
    pub fn modify_fd(&mut self, fd: RawFd, interest: Interest, token: u64) -> Result<()> {
        check_token(token)?;
        self.set.modify(fd, self.effective(interest), token)?;
        self.fds.insert(fd, (interest, token));
        Ok(())
    }

    /// Stops watching `fd`.
    pub fn remove_fd(&mut self, fd: RawFd) -> Result<()> {
        self.set.remove(fd)?;
        self.fds.remove(&fd);
        Ok(())
    }

    /// Adds a one-shot timer firing `delay` from now.
    pub fn add_timer(&mut self, delay: Duration) -> Result<TimerId> {
        let deadline = self.clock.now().saturating_add(delay);
        self.timers.add(deadline, None)
    }

    /// Adds a timer firing every `period`, first one period from now. Gives
    /// [`Error::InvalidParam`] for a zero period.
    pub fn add_periodic_timer(&mut self, period: Duration) -> Result<TimerId> {
        let deadline = self.clock.now().saturating_add(period);
        self.timers.add(deadline, Some(period))
    }

    /// Cancels a timer; false if it already fired (one-shot) or was canceled.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        self.timers.cancel(id)
    }

    /// The wait bound: the caller's timeout, shortened to the next timer's deadline.
    fn wait_timeout(&mut self, timeout: Option<Duration>) -> Option<Duration> {
        let until_timer = self
            .timers
            .next_deadline()
            .map(|d| d.saturating_sub(self.clock.now()));
        match (timeout, until_timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn expire_timers(&mut self, handler: &mut impl FnMut(AsyncEvent)) -> usize {
        self.due.clear();
        let n = self.timers.expire(self.clock.now(), &mut self.due);
        for &id in &self.due {
            handler(AsyncEvent::Timer(id));
        }
        n
    }

    fn deliver(&self, ev: Event, handler: &mut impl FnMut(AsyncEvent)) {
        if ev.token == WAKER_TOKEN {
            handler(AsyncEvent::Wakeup);
        } else {
            handler(AsyncEvent::Fd(ev));
        }
    }

    fn drain_queue(&mut self, handler: &mut impl FnMut(AsyncEvent)) -> usize {
        let mut n = 0;
        if !self.backlog.is_empty() {
            for ev in std::mem::take(&mut self.backlog) {
                self.deliver(ev, handler);
                n += 1;
            }
        }
        if let Some(t) = &self.thread {
            while let Some(ev) = t.queue.pop() {
                self.deliver(ev, handler);
                n += 1;
            }
        }
        n
    }

    /// Reports ready descriptors, wake-ups and due timers to `handler`, waiting at most
    /// `timeout` (`None`: until something happens; `Some(ZERO)`: only check) and never past the
    /// next timer's deadline. Gives the number of events reported. Allocates nothing once warm.
    ///
    /// The wait is real time; a context on a `ManualClock` should be polled with
    /// `Some(Duration::ZERO)` after advancing the clock.
    pub fn poll_once(
        &mut self,
        timeout: Option<Duration>,
        mut handler: impl FnMut(AsyncEvent),
    ) -> Result<usize> {
        if self.thread.is_none() {
            let wait = if self.backlog.is_empty() {
                self.wait_timeout(timeout)
            } else {
                Some(Duration::ZERO)
            };
            let mut count = self.drain_queue(&mut handler);
            let n = self.set.wait(&mut self.events, wait)?;
            for i in 0..n {
                let Some(ev) = self.events.get(i) else { break };
                if ev.token == WAKER_TOKEN {
                    self.waker.drain();
                }
                self.deliver(ev, &mut handler);
            }
            count += n;
            count += self.expire_timers(&mut handler);
            return Ok(count);
        }
        // Progress-thread mode: the thread fills the queue, then signals `notify`. Clearing
        // `notify` before looking at the queue means a signal that arrives later is kept for
        // the sleep below, so no event is missed.
        let notify_fd = match &self.thread {
            Some(t) => {
                t.notify.drain();
                t.notify.fd()
            }
            None => return Ok(0),
        };
        let mut count = self.drain_queue(&mut handler) + self.expire_timers(&mut handler);
        if count == 0 {
            let wait = self.wait_timeout(timeout);
            if wait != Some(Duration::ZERO) {
                poll_readable(notify_fd, wait)?;
                if let Some(t) = &self.thread {
                    t.notify.drain();
                }
                count = self.drain_queue(&mut handler) + self.expire_timers(&mut handler);
            }
        }
        Ok(count)
    }

    /// True while a progress thread runs.
    pub fn has_progress_thread(&self) -> bool {
        self.thread.is_some()
    }

    /// Starts a thread that waits on the event set and passes events to the worker through an
    /// MPMC queue of `queue_capacity` entries, waking the worker through an eventfd (see
    /// [`AsyncContext::event_fd`]). Registrations become edge-triggered so a descriptor the
    /// worker has not yet serviced does not flood the queue. When the queue is full the thread
    /// waits for room; no event is dropped. Gives [`Error::Busy`] if a thread already runs.
    ///
    /// With edge-triggered reporting, handle an [`AsyncEvent::Fd`] by reading (or writing) until
    /// the call would block, or the next readiness change may never come. Events the thread
    /// queued for a descriptor before [`AsyncContext::remove_fd`] can still be delivered once
    /// with the old token.
    pub fn start_progress_thread(&mut self, queue_capacity: usize) -> Result<()> {
        if self.thread.is_some() {
            return Err(Error::Busy("the progress thread already runs".into()));
        }
        let queue = Arc::new(MpmcQueue::new(queue_capacity)?);
        let notify = Arc::new(Waker::new()?);
        let stop = Arc::new(Waker::new()?);
        let stop_flag = Arc::new(AtomicBool::new(false));
        self.set.add(stop.fd(), Interest::READABLE, STOP_TOKEN)?;
        for (&fd, &(interest, token)) in &self.fds {
            self.set.modify(fd, interest | Interest::EDGE, token)?;
        }
        let handle = {
            let (set, queue, notify, stop_flag) = (
                Arc::clone(&self.set),
                Arc::clone(&queue),
                Arc::clone(&notify),
                Arc::clone(&stop_flag),
            );
            let waker = Arc::clone(&self.waker);
            std::thread::Builder::new()
                .name("rucx-async".into())
                .spawn(move || progress_thread(&set, &waker, &queue, &notify, &stop_flag))
                .map_err(|e| Error::io("spawning the async progress thread", e))?
        };
        self.thread = Some(ProgressThread {
            queue,
            notify,
            stop_flag,
            stop,
            handle,
        });
        Ok(())
    }

    /// Stops the progress thread and returns to worker-driven mode (level-triggered). Events the
    /// thread had queued are delivered by the next `poll_once`. Does nothing without a thread.
    pub fn stop_progress_thread(&mut self) -> Result<()> {
        let Some(t) = self.thread.take() else {
            return Ok(());
        };
        t.stop_flag.store(true, Ordering::Release);
        t.stop.wake()?;
        if t.handle.join().is_err() {
            tracing::error!("the async progress thread panicked");
        }
        while let Some(ev) = t.queue.pop() {
            self.backlog.push(ev);
        }
        self.set.remove(t.stop.fd())?;
        for (&fd, &(interest, token)) in &self.fds {
            self.set.modify(fd, interest, token)?;
        }
        Ok(())
    }
}

impl<C: Clock> Drop for AsyncContext<C> {
    fn drop(&mut self) {
        if let Err(e) = self.stop_progress_thread() {
            tracing::warn!("stopping the async progress thread: {e}");
        }
    }
}

/// The progress thread's loop: wait on the set, queue events, wake the worker.
fn progress_thread(
    set: &EventSet,
    waker: &Waker,
    queue: &MpmcQueue<Event>,
    notify: &Waker,
    stop_flag: &AtomicBool,
) {
    let mut events = Events::with_capacity(64);
    loop {
        if let Err(e) = set.wait(&mut events, None) {
            tracing::error!("async progress thread: {e}; stopping");
            return;
        }
        let mut queued = false;
        for ev in events.iter() {
            match ev.token {
                STOP_TOKEN => {
                    if stop_flag.load(Ordering::Acquire) {
                        return;
                    }
                    continue;
                }
                WAKER_TOKEN => {
                    waker.drain();
                }
                _ => {}
            }
            let mut ev = ev;
            loop {
                match queue.push(ev) {
                    Ok(()) => break,
                    Err(back) => {
                        ev = back;
                        // Full: make sure the worker knows, then wait for room.
                        if let Err(e) = notify.wake() {
                            tracing::error!("async progress thread: {e}");
                        }
                        if stop_flag.load(Ordering::Acquire) {
                            return;
                        }
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
            }
            queued = true;
        }
        if queued {
            if let Err(e) = notify.wake() {
                tracing::error!("async progress thread: {e}");
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::time::ManualClock;

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

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn timer_queue_one_shot_and_periodic() {
        let mut q = TimerQueue::new();
        let once = q.add(ms(10), None).unwrap();
        let every = q.add(ms(5), Some(ms(5))).unwrap();
        let mut due = Vec::new();
        assert_eq!(q.next_deadline(), Some(ms(5)));
        assert_eq!(q.expire(ms(4), &mut due), 0);
        assert_eq!(q.expire(ms(5), &mut due), 1);
        assert_eq!(due, vec![every]);
        due.clear();
        assert_eq!(q.expire(ms(10), &mut due), 2);
        assert_eq!(
            due,
            vec![once, every],
            "equal deadlines fire in scheduling order"
        );
        due.clear();
        assert_eq!(q.len(), 1, "the one-shot timer is gone");
        assert!(!q.cancel(once), "already fired");
        // Three periods pass: it fires once and keeps its phase.
        assert_eq!(q.expire(ms(27), &mut due), 1);
        assert_eq!(q.next_deadline(), Some(ms(30)));
        assert!(q.cancel(every));
        assert!(!q.cancel(every));
        due.clear();
        assert_eq!(q.expire(ms(1000), &mut due), 0);
        assert!(q.is_empty());
        assert_eq!(q.next_deadline(), None);
    }

    #[test]
    fn timer_queue_cancel_and_stale_ids() {
        let mut q = TimerQueue::new();
        let a = q.add(ms(1), None).unwrap();
        assert!(q.cancel(a));
        let b = q.add(ms(1), None).unwrap();
        assert_ne!(a, b, "a reused slot gets a new id");
        assert!(!q.cancel(a), "a stale id does not cancel the new timer");
        let mut due = Vec::new();
        q.expire(ms(1), &mut due);
        assert_eq!(due, vec![b]);
        assert!(matches!(
            q.add(ms(1), Some(Duration::ZERO)),
            Err(Error::InvalidParam(_))
        ));
    }

    #[test]
    fn timer_queue_compacts_canceled_entries() {
        let mut q = TimerQueue::new();
        let keep = q.add(ms(500), None).unwrap();
        for i in 0..10_000 {
            let id = q.add(ms(1000 + i), None).unwrap();
            assert!(q.cancel(id));
        }
        assert!(
            q.heap.len() <= 2 * q.len() + 33,
            "heap holds {}",
            q.heap.len()
        );
        let mut due = Vec::new();
        q.expire(Duration::MAX, &mut due);
        assert_eq!(due, vec![keep]);
    }

    #[test]
    fn context_reports_fds_timers_and_wakeups_with_fake_time() {
        let clock = ManualClock::new();
        let mut ctx = AsyncContext::new(clock.clone()).unwrap();
        let (r, w) = pipe();
        ctx.add_fd(r.as_raw_fd(), Interest::READABLE, 5).unwrap();
        let t1 = ctx.add_timer(ms(10)).unwrap();
        let tp = ctx.add_periodic_timer(ms(4)).unwrap();
        let mut got = Vec::new();
        let zero = Some(Duration::ZERO);
        assert_eq!(ctx.poll_once(zero, |e| got.push(e)).unwrap(), 0);
        write_byte(&w);
        clock.advance(ms(4));
        assert_eq!(ctx.poll_once(zero, |e| got.push(e)).unwrap(), 2);
        assert!(matches!(got[0], AsyncEvent::Fd(Event { token: 5, .. })));
        assert_eq!(got[1], AsyncEvent::Timer(tp));
        got.clear();
        read_all(&r);
        clock.advance(ms(6));
        ctx.poll_once(zero, |e| got.push(e)).unwrap();
        assert_eq!(
            got,
            vec![AsyncEvent::Timer(tp), AsyncEvent::Timer(t1)],
            "periodic again at 8ms, one-shot at 10ms"
        );
        got.clear();
        assert!(ctx.cancel_timer(tp));
        clock.advance(ms(100));
        assert_eq!(ctx.poll_once(zero, |e| got.push(e)).unwrap(), 0);

        ctx.waker().wake().unwrap();
        ctx.poll_once(WATCHDOG, |e| got.push(e)).unwrap();
        assert_eq!(got, vec![AsyncEvent::Wakeup]);
        got.clear();
        assert_eq!(ctx.poll_once(zero, |e| got.push(e)).unwrap(), 0, "drained");

        ctx.remove_fd(r.as_raw_fd()).unwrap();
        write_byte(&w);
        assert_eq!(ctx.poll_once(zero, |e| got.push(e)).unwrap(), 0);
    }

    #[test]
    fn context_rejects_reserved_tokens() {
        let mut ctx = AsyncContext::new(ManualClock::new()).unwrap();
        let (r, _w) = pipe();
        for token in [WAKER_TOKEN, STOP_TOKEN] {
            assert!(matches!(
                ctx.add_fd(r.as_raw_fd(), Interest::READABLE, token),
                Err(Error::InvalidParam(_))
            ));
        }
        assert!(matches!(
            ctx.add_periodic_timer(Duration::ZERO),
            Err(Error::InvalidParam(_))
        ));
    }

    #[test]
    fn context_wakeup_from_another_thread_interrupts_poll() {
        let mut ctx = AsyncContext::new(ManualClock::new()).unwrap();
        let waker = ctx.waker();
        let t = std::thread::spawn(move || waker.wake().unwrap());
        let mut got = Vec::new();
        while got.is_empty() {
            ctx.poll_once(WATCHDOG, |e| got.push(e)).unwrap();
        }
        t.join().unwrap();
        assert_eq!(got, vec![AsyncEvent::Wakeup]);
    }

    /// Polls until `n` events arrived; bounded so a bug fails instead of hanging.
    fn poll_until<C: Clock>(ctx: &mut AsyncContext<C>, n: usize) -> Vec<AsyncEvent> {
        let mut got = Vec::new();
        for _ in 0..1000 {
            if got.len() >= n {
                break;
            }
            ctx.poll_once(WATCHDOG, |e| got.push(e)).unwrap();
        }
        got
    }

    #[test]
    fn progress_thread_hands_fd_events_and_wakeups_to_the_worker() {
        let clock = ManualClock::new();
        let mut ctx = AsyncContext::new(clock.clone()).unwrap();
        let (r, w) = pipe();
        ctx.add_fd(r.as_raw_fd(), Interest::READABLE, 9).unwrap();
        ctx.start_progress_thread(16).unwrap();
        assert!(ctx.has_progress_thread());
        assert!(matches!(ctx.start_progress_thread(16), Err(Error::Busy(_))));
        write_byte(&w);
        let got = poll_until(&mut ctx, 1);
        assert!(
            matches!(got[..], [AsyncEvent::Fd(Event { token: 9, ready })] if ready.contains(Ready::READABLE)),
            "{got:?}"
        );
        // Edge-triggered in thread mode: the unread byte is not reported again.
        let mut again = Vec::new();
        ctx.poll_once(Some(Duration::ZERO), |e| again.push(e))
            .unwrap();
        assert!(again.is_empty(), "{again:?}");

        ctx.waker().wake().unwrap();
        assert_eq!(poll_until(&mut ctx, 1), vec![AsyncEvent::Wakeup]);

        // Timers still run on the worker, on its clock.
        let t = ctx.add_timer(ms(3)).unwrap();
        clock.advance(ms(3));
        let mut fired = Vec::new();
        ctx.poll_once(Some(Duration::ZERO), |e| fired.push(e))
            .unwrap();
        assert_eq!(fired, vec![AsyncEvent::Timer(t)]);

        // A descriptor added while the thread runs is watched too.
        let (r2, w2) = pipe();
        ctx.add_fd(r2.as_raw_fd(), Interest::READABLE, 10).unwrap();
        write_byte(&w2);
        let got = poll_until(&mut ctx, 1);
        assert!(matches!(got[..], [AsyncEvent::Fd(Event { token: 10, .. })]));

        // Back to worker mode: level-triggered again, so the unread data shows up.
        ctx.stop_progress_thread().unwrap();
        assert!(!ctx.has_progress_thread());
        let mut tokens = Vec::new();
        ctx.poll_once(Some(Duration::ZERO), |e| {
            if let AsyncEvent::Fd(ev) = e {
                tokens.push(ev.token)
            }
        })
        .unwrap();
        tokens.sort_unstable();
        assert_eq!(tokens, vec![9, 10]);
    }

    #[test]
    fn progress_thread_loses_nothing_when_the_queue_is_full() {
        let mut ctx = AsyncContext::new(ManualClock::new()).unwrap();
        let pipes: Vec<_> = (0..12).map(|_| pipe()).collect();
        for (i, (r, _)) in pipes.iter().enumerate() {
            ctx.add_fd(r.as_raw_fd(), Interest::READABLE, i as u64)
                .unwrap();
        }
        ctx.start_progress_thread(2).unwrap();
        for (_, w) in &pipes {
            write_byte(w);
        }
        let got = poll_until(&mut ctx, pipes.len());
        let mut tokens: Vec<u64> = got
            .iter()
            .filter_map(|e| match e {
                AsyncEvent::Fd(ev) => Some(ev.token),
                _ => None,
            })
            .collect();
        tokens.sort_unstable();
        assert_eq!(tokens, (0..pipes.len() as u64).collect::<Vec<_>>());
    }

    #[test]
    fn progress_thread_notify_fd_becomes_readable() {
        let mut ctx = AsyncContext::new(ManualClock::new()).unwrap();
        let (r, w) = pipe();
        ctx.add_fd(r.as_raw_fd(), Interest::READABLE, 1).unwrap();
        ctx.start_progress_thread(4).unwrap();
        let outer = EventSet::new().unwrap();
        outer.add(ctx.event_fd(), Interest::READABLE, 77).unwrap();
        write_byte(&w);
        let mut events = Events::with_capacity(2);
        assert_eq!(outer.wait(&mut events, WATCHDOG).unwrap(), 1);
        assert_eq!(events.get(0).unwrap().token, 77);
        assert_eq!(poll_until(&mut ctx, 1).len(), 1);
        drop(ctx); // stops and joins the thread
    }

    #[test]
    fn direct_mode_event_fd_is_the_epoll_set() {
        let mut ctx = AsyncContext::new(ManualClock::new()).unwrap();
        let (r, w) = pipe();
        ctx.add_fd(r.as_raw_fd(), Interest::READABLE, 1).unwrap();
        let outer = EventSet::new().unwrap();
        outer.add(ctx.event_fd(), Interest::READABLE, 2).unwrap();
        let mut events = Events::with_capacity(2);
        assert_eq!(outer.wait(&mut events, Some(Duration::ZERO)).unwrap(), 0);
        write_byte(&w);
        assert_eq!(outer.wait(&mut events, Some(Duration::ZERO)).unwrap(), 1);
    }
}
