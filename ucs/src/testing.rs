//! Test support shared by the workspace: a global allocator that counts the
//! allocations this thread makes while counting is switched on, and a port where nothing listens.
//!
//! In a test binary: `#[global_allocator] static GLOBAL: CountingAlloc = CountingAlloc;`, then
//! `COUNTING.with(|c| c.set(true))`, run the loop, switch it off and read [`ALLOCS`].

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Allocations counted so far (all threads that had counting on).
pub static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether allocations by this thread are counted now.
    pub static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

/// The system allocator, counting allocations made while [`COUNTING`] is on.
pub struct CountingAlloc;

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// A socket bound to a kernel-picked port on 127.0.0.1 that never listens, and that port: a
/// connection to it is refused, and no other process can take the port while the socket lives
/// (tests that need "nothing listens there" keep it until they end, instead of picking a port
/// that was free a moment ago).
pub fn refusing_port() -> std::io::Result<(std::os::fd::OwnedFd, u16)> {
    use std::os::fd::FromRawFd;
    let err = std::io::Error::last_os_error;
    // SAFETY: plain socket calls on a descriptor this function owns; the address structures
    // are valid for the lengths given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(err());
        }
        let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len) != 0 {
            return Err(err());
        }
        let mut got: libc::sockaddr_in = std::mem::zeroed();
        let mut glen = len;
        if libc::getsockname(fd, &mut got as *mut _ as *mut libc::sockaddr, &mut glen) != 0 {
            return Err(err());
        }
        Ok((owned, u16::from_be(got.sin_port)))
    }
}

#[cfg(test)]
mod refusing_port_tests {
    /// Nothing accepts on the port while the socket is held: a connection is refused.
    #[test]
    fn connections_to_the_port_are_refused() {
        let (_held, port) = super::refusing_port().expect("socket");
        assert_ne!(port, 0);
        let e = std::net::TcpStream::connect(("127.0.0.1", port)).expect_err("refused");
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    }
}
