//! The listening socket: accepting connections, and pausing at the descriptor limit (no timer
//! descriptor ends a pause: progress resumes accepting once it is over, and
//! `Iface::wake_within` tells a caller sleeping on the event fd when that is).

use super::conn::{Conn, ConnState};
use super::inner::Inner;
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use ucs::async_ctx::Interest;

/// The listening socket's epoll token.
pub(super) const LISTENER_TOKEN: u64 = u64::MAX;
/// First pause of the listening socket after `accept` hits the descriptor limit.
pub(super) const ACCEPT_PAUSE_MIN: Duration = Duration::from_millis(100);
/// Longest pause of the listening socket after repeated descriptor-limit failures.
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);
/// Connections one [`Inner::accept_all`] call accepts at most; the rest wait in the backlog,
/// and the listening socket (level-triggered) is reported again by the next poll. The hellos of
/// the accepted ones are read in between, so an accepted connection that a simultaneous connect
/// makes redundant is freed before the next ones are accepted: a hub that 1,000 peers dial at
/// once holds a few such connections at a time, not 1,000 (400 bytes each, which the heap then
/// keeps).
pub(super) const ACCEPT_BATCH: usize = 8;

impl Inner {
    /// Sets the listening socket's epoll interest: readable, or nothing (paused).
    pub(super) fn arm_listener(&mut self, on: bool) {
        let Some(l) = self.listener.as_ref() else {
            return;
        };
        let flags = if on {
            Interest::READABLE
        } else {
            Interest::empty()
        };
        if let Err(e) = self.epoll.modify(l.as_raw_fd(), flags, LISTENER_TOKEN) {
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
            self.accept_pause = (self.accept_pause * 2).min(ACCEPT_PAUSE_MAX);
        }
    }

    /// Accepts the waiting connections, at most [`ACCEPT_BATCH`] of them.
    pub(super) fn accept_all(&mut self) {
        if self.accept_paused_until.is_some() {
            return;
        }
        for _ in 0..ACCEPT_BATCH {
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
            c.peer = addr.as_socket_ipv4();
            c.sock = Some(sock);
            // The connector sends its hello right after connecting: this progress call reads
            // it (and frees a redundant connection) instead of waiting for epoll to report it.
            c.readable = true;
            let key = self.conns.insert(Box::new(c));
            self.active.push(key);
            self.set_mask(key, Interest::READABLE);
        }
    }
}
