//! A wake-up signal any thread can raise: an eventfd that becomes readable when signalled, to
//! put in an [`EventSet`](super::EventSet) (UCX's `ucp_worker_signal`).

use crate::status::{Error, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn wake_counts_until_drained() {
        let w = Waker::new().unwrap();
        assert_eq!(w.drain(), 0);
        w.wake().unwrap();
        w.wake().unwrap();
        assert_eq!(w.drain(), 2);
        assert_eq!(w.drain(), 0);
        assert!(w.fd() >= 0);
    }
}
