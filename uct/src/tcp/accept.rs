//! The listening socket: accepting connections, and pausing at the descriptor limit.

use super::conn::{Conn, ConnState};
use super::inner::Inner;
use nix::sys::epoll::{EpollEvent, EpollFlags};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

/// The listening socket's epoll token.
pub(super) const LISTENER_TOKEN: u64 = u64::MAX;
/// Epoll token of the timer that ends a pause of the listening socket.
pub(super) const ACCEPT_TIMER_TOKEN: u64 = u64::MAX - 1;

/// A non-blocking monotonic timerfd, or `None`.
pub(super) fn new_timer() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain syscall; the result is checked.
    let fd = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    };
    // SAFETY: `fd` is a new descriptor this function owns.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// First pause of the listening socket after `accept` hits the descriptor limit.
pub(super) const ACCEPT_PAUSE_MIN: Duration = Duration::from_millis(100);
/// Longest pause of the listening socket after repeated descriptor-limit failures.
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);

impl Inner {
    /// Sets the listening socket's epoll interest: readable, or nothing (paused).
    pub(super) fn arm_listener(&mut self, on: bool) {
        let Some(l) = self.listener.as_ref() else {
            return;
        };
        let flags = if on {
            EpollFlags::EPOLLIN
        } else {
            EpollFlags::empty()
        };
        let mut ev = EpollEvent::new(flags, LISTENER_TOKEN);
        if let Err(e) = self.epoll.modify(l.as_fd(), &mut ev) {
            tracing::warn!("epoll_ctl on the tcp listening socket failed: {e}");
        }
    }

    /// Puts the listening socket back in the epoll set once its pause is over; true when it
    /// was resumed (the caller accepts what waited meanwhile).
    pub(super) fn resume_accept(&mut self, now: Instant) -> bool {
        match self.accept_paused_until {
            Some(t) if now >= t => {
                self.accept_paused_until = None;
                self.arm_listener(true);
                true
            }
            _ => false,
        }
    }

    /// `accept` failed: at the descriptor limit the listening socket leaves the epoll set for
    /// a pause (level-triggered readiness would otherwise report it again at once, forever),
    /// and the waiting client stays in the kernel's backlog until descriptors free up. Logged
    /// at most once a second, with the limit.
    pub(super) fn accept_failed(&mut self, e: &io::Error) {
        let now = Instant::now();
        let fd_limit = ucs::limits::is_fd_limit(e);
        if let Some(held) = self.accept_log.allow(now) {
            let more = if held > 0 {
                format!(" ({held} similar failures not logged)")
            } else {
                String::new()
            };
            let then = if fd_limit {
                format!(
                    "; new connections wait in the backlog, retrying in {} ms",
                    self.accept_pause.as_millis()
                )
            } else {
                String::new()
            };
            tracing::warn!(
                "tcp {}:{}: cannot accept a connection: {}{then}{more}",
                self.local.ip,
                self.local.port,
                ucs::limits::explain_io(e)
            );
        }
        if fd_limit {
            self.arm_listener(false);
            self.accept_paused_until = Some(now + self.accept_pause);
            if let Some(t) = self.accept_timer.as_ref() {
                let spec = libc::itimerspec {
                    it_interval: libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    },
                    it_value: libc::timespec {
                        tv_sec: self.accept_pause.as_secs() as libc::time_t,
                        tv_nsec: self.accept_pause.subsec_nanos() as libc::c_long,
                    },
                };
                // SAFETY: `t` is our timerfd; `spec` is a valid itimerspec; no old value asked.
                unsafe { libc::timerfd_settime(t.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
            }
            self.accept_pause = (self.accept_pause * 2).min(ACCEPT_PAUSE_MAX);
        }
    }

    pub(super) fn accept_all(&mut self) {
        if self.accept_paused_until.is_some() {
            return;
        }
        loop {
            let Some(l) = self.listener.as_ref() else {
                return;
            };
            let (sock, addr) = match l.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.accept_failed(&e);
                    return;
                }
            };
            self.accept_pause = ACCEPT_PAUSE_MIN;
            if let Err(e) = self.sock_cfg.apply(&sock) {
                tracing::warn!("configuring an accepted tcp connection failed: {e}");
                continue;
            }
            let mut c = Conn::new(ConnState::Connected, None);
            c.expect_hello = true;
            c.peer = addr.as_socket();
            c.sock = Some(sock);
            let key = self.conns.insert(c);
            self.active.push(key);
            self.set_mask(key, EpollFlags::EPOLLIN);
        }
    }
}
