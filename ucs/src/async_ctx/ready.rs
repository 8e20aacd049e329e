//! A look at one descriptor's readiness without waiting: for the checks a data path makes in
//! passing (has the peer process exited, did the granting process write or hang up), where
//! registering the descriptor in an [`EventSet`](super::EventSet) would cost more than the
//! look. Waiting is the event set's job; this never blocks.

use super::{Interest, Ready};
use crate::status::{Error, Result};
use std::os::fd::RawFd;

/// What `fd` is ready for now, among `interest` (hang-ups and errors are always reported):
/// one `poll(2)` with no timeout.
pub fn ready_now(fd: RawFd, interest: Interest) -> Result<Ready> {
    let mut events = libc::POLLRDHUP;
    if interest.contains(Interest::READABLE) {
        events |= libc::POLLIN;
    }
    if interest.contains(Interest::WRITABLE) {
        events |= libc::POLLOUT;
    }
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: FFI with one valid pollfd and no timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        if n >= 0 {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(Error::io("poll", err));
        }
    }
    let bits = p.revents;
    let mut ready = Ready::empty();
    if bits & (libc::POLLIN | libc::POLLPRI) != 0 {
        ready |= Ready::READABLE;
    }
    if bits & libc::POLLOUT != 0 {
        ready |= Ready::WRITABLE;
    }
    if bits & (libc::POLLERR | libc::POLLNVAL) != 0 {
        ready |= Ready::ERROR;
    }
    if bits & (libc::POLLHUP | libc::POLLRDHUP) != 0 {
        ready |= Ready::HANGUP;
    }
    Ok(ready)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn reports_data_room_and_hangup() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let fd = b.as_raw_fd();
        assert_eq!(ready_now(fd, Interest::READABLE).unwrap(), Ready::empty());
        assert_eq!(ready_now(fd, Interest::WRITABLE).unwrap(), Ready::WRITABLE);
        a.write_all(b"x").unwrap();
        assert!(ready_now(fd, Interest::READABLE)
            .unwrap()
            .contains(Ready::READABLE));
        drop(a);
        assert!(ready_now(fd, Interest::READABLE)
            .unwrap()
            .contains(Ready::HANGUP));
    }

    #[test]
    fn descriptor_not_open_is_an_error_condition() {
        // No process has this many descriptors open.
        assert!(ready_now(i32::MAX, Interest::READABLE)
            .unwrap()
            .contains(Ready::ERROR));
    }
}
